"""Runs the blocks of one Markdown page as a reader would (see markdown_blocks.py).

Usage: ``python page_runner.py BLOCKS.json`` in the page's working directory. Prints
what every block and command printed; exits 1 at the first failure, naming the page
line, the command and its output.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import traceback
from pathlib import Path

_ID_AT_START = re.compile(r"^([0-9a-f]{32})\b", re.MULTILINE)
COMMAND_TIMEOUT = 120


class Placeholders:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def saw(self, command: str, output: str) -> None:
        ids = _ID_AT_START.findall(output)
        if not ids:
            return
        words = shlex.split(command) if command else []
        if "dlq" in words and "list" in words:
            self.values["<dead id>"] = ids[0]
        elif "dlq" not in words:
            self.values["<job id>"] = ids[-1]

    def fill(self, where: str, command: str) -> str:
        for name in re.findall(r"<[a-z][a-z ]*>", command):
            if name not in self.values:
                fail(where, command, f"nothing printed so far gives a value for {name}")
            command = command.replace(name, self.values[name])
        return command


def fail(where: str, what: str, detail: str) -> None:
    print(f"\nDOC FAILURE at {where}: {what}\n{detail}", flush=True)
    sys.exit(1)


def run_python(block: dict[str, str], namespace: dict[str, object], ph: Placeholders) -> None:
    buffer = io.StringIO()

    class Tee(io.TextIOBase):
        def write(self, s: str) -> int:
            buffer.write(s)
            sys.__stdout__.write(s)
            return len(s)

    code = compile(block["code"], block["where"], "exec")
    try:
        with contextlib.redirect_stdout(Tee()):
            exec(code, namespace)  # noqa: S102 - running the docs is the point
    except BaseException:  # noqa: BLE001 - report any failure of the block, then stop
        fail(block["where"], "python block raised", traceback.format_exc())
    ph.saw("", buffer.getvalue())


def run_command(where: str, command: str, ph: Placeholders) -> None:
    filled = ph.fill(where, command)
    print(f"$ {filled}", flush=True)
    try:
        proc = subprocess.run(
            ["bash", "-o", "pipefail", "-c", filled],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
        )
    except subprocess.TimeoutExpired as exc:
        fail(where, filled, f"still running after {COMMAND_TIMEOUT} s: {exc.output!r}")
    sys.stdout.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        fail(where, filled, f"exit code {proc.returncode}\n{proc.stdout}{proc.stderr}")
    ph.saw(filled, proc.stdout)


def main() -> None:
    blocks = json.loads(Path(sys.argv[1]).read_text())
    sys.path.insert(0, os.getcwd())  # like `python` in this folder: ./tasks.py imports
    namespace: dict[str, object] = {"__name__": "__main__"}
    ph = Placeholders()
    from markdown_blocks import Block, commands  # noqa: PLC0415 - needs this dir on sys.path

    for block in blocks:
        if block["file"]:
            Path(block["file"]).write_text(block["code"])
            print(f"# wrote {block['file']} ({block['where']})", flush=True)
        elif block["lang"] == "python":
            print(f"# python block {block['where']}", flush=True)
            run_python(block, namespace, ph)
        else:
            as_block = Block(page="", line=0, lang=block["lang"], code=block["code"])
            for command in commands(as_block):
                run_command(block["where"], command, ph)


if __name__ == "__main__":
    main()
