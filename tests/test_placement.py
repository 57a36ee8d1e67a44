"""Placing workers on GPUs: whole GPUs and shares of one."""

from workbench.backends._placement import place, usage


def test_whole_gpus():
    assert place(1, 2, [0, 1, 2, 3], {}) == [[0], [1]]
    assert place(2, 2, [0, 1, 2, 3], {0: 1.0}) is None  # 3 free, 4 needed
    assert place(4, 1, [0, 1, 2, 3], {1: 0.5}) is None
    assert place(0, 3, [], {}) == [[], [], []]


def test_fractional_packs_onto_shared_gpu():
    used = usage([(0.5, [[2]])])
    assert used == {2: 0.5}
    assert place(0.5, 1, [0, 1, 2], used) == [[2]]
    assert place(0.5, 3, [0, 1], {}) == [[0], [0], [1]]
    assert place(1, 1, [0], {0: 0.5}) is None
