"""Splitting framed metric records off a rank's raw output: glued records, torn chunks."""

from __future__ import annotations

from workbench.monitor.stream import MetricByteSplitter, format_metric_line, strip_metric_text

RECORD = {"kind": "scalars", "time": 1.5, "rank": 0, "step": 3, "loss": 0.25}


def _split_in_pieces(stream: bytes, size: int) -> tuple[bytes, list[dict]]:
    splitter = MetricByteSplitter()
    out, records = b"", []
    for i in range(0, len(stream), size):
        user, got = splitter.split(stream[i : i + size])
        out += user
        records += got
    return out + splitter.close(), records


def test_a_record_glued_after_a_partial_user_line_keeps_both():
    # print("epoch 3 ...", end="") then run.log(...) then print(" done"): the record lands
    # inside the user's line; the line is joined again and the record split off.
    frame = format_metric_line(RECORD).encode()
    stream = (
        b"epoch 3 ..." + frame + b" done\n"
        + b"\x1b[32mgreen\x1b[0m 50%\r" + frame + b"100%\n"
        + frame + frame  # two in a row at a line start
        + "caf\u00e9 ".encode() + frame + b"tail without newline"
    )  # fmt: skip
    want = "epoch 3 ... done\n\x1b[32mgreen\x1b[0m 50%\r100%\ncaf\u00e9 tail without newline"
    for size in (1, 2, 3, 5, 11, 64, len(stream)):  # every way a pipe may cut it
        user, records = _split_in_pieces(stream, size)
        assert user.decode() == want, size
        assert records == [RECORD] * 5, size


def test_only_a_possible_record_is_held_back_and_a_fake_one_stays_the_users():
    splitter = MetricByteSplitter()
    assert splitter.split(b"step 3 of 10 ...") == (b"step 3 of 10 ...", [])
    assert splitter.split(b"abc\x1f@wb") == (b"abc", [])  # could be a prefix: held
    assert splitter.split(b"-metric {not json}\nnext") == (b"\x1f@wb-metric {not json}\nnext", [])
    assert splitter.split(b"x\x1fy\x1f") == (b"x\x1fy", [])  # a lone unit separator passes
    assert splitter.split(b"z\n") == (b"\x1fz\n", [])
    # A prefix with no newline in sight is not held for ever.
    big = b"\x1f@wb-metric " + b"x" * (MetricByteSplitter.MAX_RECORD + 10)
    assert splitter.split(big) == (big, [])


def test_displayed_lines_lose_glued_records():
    frame = format_metric_line(RECORD).rstrip("\n")
    assert strip_metric_text("plain") == "plain"
    assert strip_metric_text(frame) is None
    assert strip_metric_text("epoch 3 ..." + frame) == "epoch 3 ..."
    assert strip_metric_text("\x1f@wb-metric {torn") == "\x1f@wb-metric {torn"
