"""A real IPython kernel driven over jupyter_client, the way a notebook frontend drives it."""

from __future__ import annotations

import os
import queue
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_client.manager import KernelManager


@dataclass
class Reply:
    """What one executed cell sent back: streams, rich outputs, the error, display updates."""

    status: str = ""
    stdout: str = ""
    stderr: str = ""
    results: list[dict[str, Any]] = field(default_factory=list)  # execute_result data
    displays: list[dict[str, Any]] = field(default_factory=list)  # display_data messages
    updates: list[dict[str, Any]] = field(default_factory=list)  # update_display_data
    ename: str = ""
    evalue: str = ""
    traceback: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def text(self) -> str:
        """Everything a reader of the cell sees as text (streams, text/plain, the error)."""
        plain = [d.get("text/plain", "") for d in self.results]
        plain += [m["data"].get("text/plain", "") for m in self.displays]
        return "\n".join([self.stdout, self.stderr, *plain, *self.traceback])


class Kernel:
    """One python3 kernel in ``cwd`` with this process's environment (WORKBENCH_HOME too)."""

    def __init__(self, cwd: Path, env: dict[str, str] | None = None) -> None:
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=str(cwd), env={**os.environ, **(env or {})})
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def send(self, code: str) -> str:
        """Start executing ``code``; returns the request's msg_id (collect with ``collect``)."""
        return str(self.kc.execute(code, store_history=True))

    def collect(self, msg_id: str, timeout: float = 120.0) -> Reply:
        """Read iopub until the kernel is idle again after ``msg_id``."""
        reply = Reply()
        started = time.monotonic()
        deadline = started + timeout
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"cell did not finish in {timeout} s: {reply}") from None
            kind, content = msg["msg_type"], msg["content"]
            if kind == "update_display_data":  # may come from any cell's thread
                reply.updates.append(content)
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if kind == "stream":
                if content["name"] == "stdout":
                    reply.stdout += content["text"]
                else:
                    reply.stderr += content["text"]
            elif kind == "execute_result":
                reply.results.append(content["data"])
            elif kind == "display_data":
                reply.displays.append(content)
            elif kind == "error":
                reply.ename, reply.evalue = content["ename"], content["evalue"]
                reply.traceback = list(content["traceback"])
            elif kind == "status" and content["execution_state"] == "idle":
                break
        reply.seconds = time.monotonic() - started
        # The reply to THIS request: an earlier one left on the shell channel (a
        # kernel_info_reply from start-up, say) would shift every status by one.
        while True:
            shell = self.kc.get_shell_msg(timeout=max(1.0, deadline - time.monotonic()))
            if shell["parent_header"].get("msg_id") == msg_id:
                break
        reply.status = shell["content"]["status"]
        return reply

    def run(self, code: str, timeout: float = 120.0) -> Reply:
        """Execute ``code`` and wait for it to finish."""
        return self.collect(self.send(code), timeout)

    def value(self, expr: str, timeout: float = 60.0) -> Any:
        """``expr`` evaluated in the kernel (through repr/literal_eval of its text/plain)."""
        import ast

        reply = self.run(f"repr({expr})", timeout)
        assert reply.status == "ok", reply.traceback
        return ast.literal_eval(ast.literal_eval(reply.results[0]["text/plain"]))

    def interrupt(self) -> None:
        """SIGINT the kernel, as the stop button does."""
        self.km.interrupt_kernel()

    def stop(self) -> None:
        """Shut the kernel down."""
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def output_text(output: Any) -> str:
    """The text a saved notebook output shows (stream, plain-text result, traceback)."""
    if output.output_type == "stream":
        return str(output.text)
    if output.output_type in ("execute_result", "display_data"):
        return str(output.data.get("text/plain", ""))
    if output.output_type == "error":
        return "\n".join(output.traceback)
    return ""
