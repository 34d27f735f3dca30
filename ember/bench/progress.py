"""A plain progress bar on stderr: redrawn in place on a terminal, one line per finished case otherwise."""
from __future__ import annotations

import shutil
import sys
import time


class Progress:
    def __init__(self, stream=None, width: int = 24):
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.width, self.start, self.last_len, self.last_done = width, time.perf_counter(), 0, -1

    def __call__(self, done: int, total: int, label: str) -> None:
        filled = int(self.width * done / max(total, 1))
        bar = "#" * filled + "." * (self.width - filled)
        text = f"[{bar}] {done}/{total} {time.perf_counter() - self.start:5.0f}s  {label}"
        if self.tty:
            cols = shutil.get_terminal_size((100, 20)).columns - 1
            text = text[:cols]
            self.stream.write("\r" + text.ljust(self.last_len))
            self.last_len = len(text)
        elif done != self.last_done:
            self.stream.write(text + "\n")
        self.last_done = done
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self.last_len:
            self.stream.write("\n")
            self.stream.flush()
