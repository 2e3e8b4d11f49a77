#!/usr/bin/env python3
"""tests/tools/ringrun_terminal_test.py: ringrun under job control, in a real terminal.

    ringrun_terminal_test.py RINGRUN RINGRUN_PROBE

An interactive bash (job control on) runs in a pseudo-terminal that this script drives as a user
at a keyboard would; ringrun runs two probes in it that print a tick every 50 ms. Each rank leads
its own process group, so the terminal's signals reach ringrun alone, and ringrun must pass them on:

  Ctrl-Z        the ranks stop with ringrun (state T in /proc), and bash says "Stopped"
  fg            the ranks run again, and their ticks come through again
  bg + tostop   ringrun, in the background, stops at its next write to the terminal (SIGTTOU),
                and its ranks stop with it
  Ctrl-C        the job ends with status 130

Every wait polls for its condition with a generous deadline (a slow, loaded machine must pass);
nothing sleeps a fixed time. Exit status 0 when every check holds, 1 otherwise.
"""
import os
import pty
import re
import select
import signal
import sys
import time

DEADLINE_S = 20  # for each condition; they take milliseconds on an idle machine


class Terminal:
    """bash in a pseudo-terminal: what it printed so far, and keys to type into it."""

    def __init__(self):
        env = dict(os.environ, PS1="READY> ", TERM="dumb", HISTFILE="/dev/null")
        for name in ("RANK", "WORLD_SIZE", "RINGGRAD_JOB_TOKEN", "RINGGRAD_LAUNCHER"):
            env.pop(name, None)
        self.pid, self.fd = pty.fork()  # the child leads a new session with the terminal as its own
        if self.pid == 0:
            os.execve("/bin/bash", ["bash", "--norc", "--noprofile", "-i"], env)
        self.text = ""

    def pump(self, timeout_s):
        """Reads what the terminal printed within timeout_s; False once bash has closed it."""
        ready, _, _ = select.select([self.fd], [], [], timeout_s)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: every process holding the terminal has gone
            return False
        self.text += data.decode("utf-8", "replace")
        return bool(data)

    def type(self, keys):
        os.write(self.fd, keys.encode())

    def wait_for(self, what, condition):
        """Reads until condition() holds; fails the test, naming `what`, after DEADLINE_S."""
        deadline = time.monotonic() + DEADLINE_S
        while not condition():
            if time.monotonic() > deadline:
                fail(f"expected {what} within {DEADLINE_S} s, it did not happen")
            if not self.pump(0.05):
                if condition():
                    return
                fail(f"expected {what}, but the terminal closed")

    def count(self, pattern):
        return len(re.findall(pattern, self.text))


def state(pid):
    """The process's state letter from /proc/PID/stat (R, S, T, Z, ...), or '-' once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return "-"
    return text[text.rfind(")") + 2]


def parent(pid):
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    return int(text[text.rfind(")") + 2:].split()[1])


terminal = None
ranks = []


def fail(message):
    print(f"FAIL: {message}")
    if terminal is not None:
        print("the terminal so far (last 3000 characters):\n" + terminal.text[-3000:])
        print("states:", {pid: state(pid) for pid in ranks})
    cleanup()
    sys.exit(1)


def cleanup():
    for pid in ranks:  # SIGKILL, which needs no SIGCONT; ringrun's ranks also die with it
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if terminal is not None:
        try:
            os.kill(terminal.pid, signal.SIGKILL)
            os.waitpid(terminal.pid, 0)
        except OSError:
            pass


def ticks_after(mark):
    """How many ticks each rank printed after terminal.text[:mark]."""
    later = terminal.text[mark:]
    return [len(re.findall(rf"\[rank {r}\] tick \d+", later)) for r in (0, 1)]


def main():
    global terminal, ranks
    ringrun, probe = sys.argv[1], sys.argv[2]
    terminal = Terminal()
    terminal.wait_for("bash's prompt", lambda: "READY> " in terminal.text)

    terminal.type(f"{ringrun} --nproc-per-node 2 {probe} tick 600000\n")
    terminal.wait_for("both ranks' pids", lambda: terminal.count(r"\] env .* PID=\d+") >= 2)
    ranks = [int(p) for p in re.findall(r"\] env .* PID=(\d+)", terminal.text)[:2]]
    launcher = parent(ranks[0])
    terminal.wait_for("ticks from both ranks", lambda: min(ticks_after(0)) >= 2)

    # Ctrl-Z: the terminal sends SIGTSTP to its foreground process group, ringrun's, and no rank is in it.
    terminal.type("\x1a")
    terminal.wait_for("bash to say the job stopped", lambda: terminal.count(r"Stopped") >= 1)
    terminal.wait_for("ringrun and both ranks stopped (state T) after Ctrl-Z",
                      lambda: all(state(pid) == "T" for pid in ranks + [launcher]))
    print("ok    Ctrl-Z stops ringrun and both ranks")

    mark = len(terminal.text)
    terminal.type("fg\n")
    terminal.wait_for("ticks from both ranks again after fg", lambda: min(ticks_after(mark)) >= 3)
    if any(state(pid) == "T" for pid in ranks):
        fail(f"expected both ranks running after fg, got states {[state(pid) for pid in ranks]}")
    print("ok    fg continues ringrun and both ranks; their output comes through again")

    # In the background with tostop, ringrun's next write to the terminal gets SIGTTOU, which stops it;
    # its ranks must stop too, not run on headless.
    terminal.type("\x1a")
    terminal.wait_for("bash to say the job stopped again", lambda: terminal.count(r"Stopped") >= 2)
    mark = len(terminal.text)
    terminal.type("stty tostop; set -b; bg\n")  # set -b: bash reports the job's next stop at once
    terminal.wait_for("bash to say the job, continued in the background, stopped again",
                      lambda: re.search(r" &\s.*Stopped", terminal.text[mark:], re.S))
    terminal.wait_for("ringrun and both ranks stopped (state T) after SIGTTOU",
                      lambda: all(state(pid) == "T" for pid in ranks + [launcher]))
    print("ok    in the background with tostop, ringrun's write stops it and both ranks")

    mark = len(terminal.text)
    terminal.type("stty -tostop; fg\n")
    terminal.wait_for("ticks from both ranks after the last fg", lambda: min(ticks_after(mark)) >= 3)
    terminal.type("\x03")  # Ctrl-C: SIGINT to ringrun, which forwards it
    terminal.type("echo status=$?\n")
    terminal.wait_for("ringrun's exit status", lambda: re.search(r"status=\d+", terminal.text[mark:]))
    status = int(re.search(r"status=(\d+)", terminal.text[mark:]).group(1))
    if status != 130:
        fail(f"expected ringrun to exit 130 after Ctrl-C, got {status}")
    deadline = time.monotonic() + DEADLINE_S
    while any(state(pid) not in "-Z" for pid in ranks):
        if time.monotonic() > deadline:
            fail(f"expected both ranks gone after Ctrl-C, got states {[state(pid) for pid in ranks]}")
        time.sleep(0.01)
    print("ok    Ctrl-C ends the job with status 130 and no rank left")

    terminal.type("exit\n")
    deadline = time.monotonic() + DEADLINE_S
    while terminal.pump(0.05) and time.monotonic() < deadline:
        pass
    cleanup()
    terminal = None
    return 0


if __name__ == "__main__":
    sys.exit(main())
