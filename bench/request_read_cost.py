#!/usr/bin/python3
"""What reading a shell session's request costs the driver, by form of request (issue 10).

Two ways a driver like lib/sandbox/shell_session_core.cpp's can read a request, reduced to the
read and the exec of the command's shell: "lines", the driver's (`read` per line, which takes a
pipe a byte at a time), and "source" (a key line, then the request sourced from stdin, which dash
and busybox read a block at a time). The driver does not use "source": reopening its stdin
through /proc/self/fd/0 needs read permission on the runtime's pipe, which a non-root container
does not have. Each request runs a command whose output is dropped; the driver answers with a
line once the command has ended. Prints the median round trip per command over pipes, outside
any sandbox, three alternating runs per command.

usage: bench/request_read_cost.py [SHELL] [CALLS]
  SHELL: default /bin/sh; for busybox, a symlink named sh to it. CALLS: default 1000.
"""
import os
import statistics
import subprocess
import sys
import time

LINES = r"""_ksb_n=0 _ksb_sh=$1
_ksb_nl='
'
_ksb_go() { exec "$_ksb_sh" -c "$1" </dev/null >/dev/null 2>&1; }
while :; do
  (
    _ksb_c=
    while IFS= read -r _ksb_l || { kill -9 $$; exit 0; }; do
      case $_ksb_l in
        +*) _ksb_c="$_ksb_c${_ksb_l#+}$_ksb_nl" ;;
        -*) _ksb_c="$_ksb_c${_ksb_l#-}" ;;
        ".$((_ksb_n + 1))") break ;;
        *) kill -9 $$; exit 0 ;;
      esac
    done
    _ksb_go "$_ksb_c"
  )
  _ksb_n=$((_ksb_n + 1))
  echo "$_ksb_n"
done
"""

SOURCE = r"""_ksb_n=0 _ksb_sh=$1
_ksb_go() { exec "$_ksb_sh" -c "$1" </dev/null >/dev/null 2>&1; }
while :; do
  (
    IFS= read -r _ksb_l && [ "$_ksb_l" = "k.$((_ksb_n + 1))" ] || { kill -9 $$; exit 0; }
    command . /proc/self/fd/0
    kill -9 $$; exit 0
  )
  _ksb_n=$((_ksb_n + 1))
  echo "$_ksb_n"
done
"""


def lines_request(command, n):
    out = []
    parts = command.split("\n")
    for i, line in enumerate(parts):
        if i < len(parts) - 1:
            out.append("+" + line + "\n")
        elif line:
            out.append("-" + line + "\n")
    return "".join(out) + ".%d\n" % n


def source_request(command, n):
    return "k.%d\n_ksb_go '%s'\n" % (n, command.replace("'", "'\\''"))


def median_us(shell, script, encode, command, calls):
    p = subprocess.Popen([shell, "-c", script, "sh", shell], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    walls = []
    for n in range(1, calls + 1):
        request = encode(command, n).encode()
        t = time.perf_counter()
        os.write(p.stdin.fileno(), request)
        answer = p.stdout.readline()
        walls.append(time.perf_counter() - t)
        if answer != b"%d\n" % n:
            raise SystemExit("unexpected answer %r" % answer)
    p.kill()
    p.wait()
    return statistics.median(walls[1:]) * 1e6


def main():
    shell = sys.argv[1] if len(sys.argv) > 1 else "/bin/sh"
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    # `true`, and a script the size of a file operation's (grep's is about 1.3 KB).
    commands = {"true (4 bytes)": "true", "script of 1,300 bytes": ": '" + "x" * 1290 + "'\ntrue"}
    for name, command in commands.items():
        for _ in range(3):  # alternating, so that a drift of the machine shows in both
            lines = median_us(shell, LINES, lines_request, command, calls)
            source = median_us(shell, SOURCE, source_request, command, calls)
            print("%-22s lines %7.0f us   source %7.0f us   saved %6.0f us" % (name, lines, source, lines - source))


if __name__ == "__main__":
    main()
