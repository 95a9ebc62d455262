"""dlaunch from Python: start a job, wait for it, follow its events and its
ranks' output, signal and stop it.

A thin client of the `dlaunch` command (docs/events.md): a job is started
detached (`dlaunch -d`), so that it outlives the Python process that started
it, and is reached afterwards through its record, by name, from this process
or any other of the same user on the same machine::

    import dlaunch
    job = dlaunch.start(["python3", "train.py", "--steps", "100"], hosts="hosts.yaml")
    for event in job.events(follow=True):
        if event["type"] == "rank_exited" and event["code"] != 0:
            print("rank", event["rank"], "failed")
    print(job.wait())            # the job's exit status, as `dlaunch wait`

The `dlaunch` used is the one given as `binary`, else $DLAUNCH, else the one
on PATH. Every call runs that command; nothing here talks to a job any other
way, so what the command refuses (another user's job, a job whose head runs
on another machine) is refused here too, as DlaunchError.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Iterator, List, Optional, Sequence

__all__ = ["DlaunchError", "StartError", "Job", "start", "job", "jobs"]


class DlaunchError(RuntimeError):
    """A dlaunch command failed: `status` is its exit status, `stderr` what it said."""

    def __init__(self, command: Sequence[str], status: int, stderr: str):
        self.command = list(command)
        self.status = status
        self.stderr = stderr
        last = stderr.strip().splitlines()[-1] if stderr.strip() else "no message"
        super().__init__(f"{' '.join(self.command[:2])}: exit status {status}: {last}")


class StartError(DlaunchError):
    """The job could not start (bad input: status 2; a node that could not
    start, a program missing: the job's status); `stderr` holds the report."""


def _binary(binary: Optional[str]) -> str:
    found = binary or os.environ.get("DLAUNCH") or shutil.which("dlaunch")
    if not found:
        raise FileNotFoundError("dlaunch is not on PATH (give binary= or set DLAUNCH)")
    return found


def _run(argv: List[str], env: Optional[dict] = None,
         cwd: Optional[str] = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          env=env, cwd=cwd, check=False)


def _lines(argv: List[str], env: Optional[dict] = None) -> Iterator[str]:
    """The command's stdout line by line as it comes; DlaunchError at the end
    if it failed. Closing the generator early stops the command."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            yield line
        err = proc.stderr.read() if proc.stderr else ""
        status = proc.wait()
        if status != 0:
            raise DlaunchError(argv, status, err)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait()
        for f in (proc.stdout, proc.stderr):
            if f:
                f.close()


class Job:
    """A job by its record's name (what `dlaunch ps` shows)."""

    def __init__(self, name: str, binary: Optional[str] = None, env: Optional[dict] = None):
        self.name = name
        self._dlaunch = _binary(binary)
        self._env = env

    def __repr__(self) -> str:
        return f"dlaunch.Job({self.name!r})"

    def _verb(self, *args: str) -> subprocess.CompletedProcess:
        argv = [self._dlaunch, *args]
        r = _run(argv, self._env)
        if r.returncode != 0:
            raise DlaunchError(argv, r.returncode, r.stderr)
        return r

    def status(self) -> dict:
        """`dlaunch status JOB --json`: state (running, ended, lost, elsewhere),
        exit_status once ended, the command line, nodes, ranks, ..."""
        return json.loads(self._verb("status", self.name, "--json").stdout)

    def wait(self) -> int:
        """Blocks until the job has ended; its exit status (`dlaunch wait`).
        DlaunchError for a job that ended without one (its head was killed)."""
        argv = [self._dlaunch, "wait", self.name]
        r = _run(argv, self._env)
        if r.returncode != 0 and self.status().get("exit_status") != r.returncode:
            raise DlaunchError(argv, r.returncode, r.stderr)
        return r.returncode

    def events(self, follow: bool = False) -> Iterator[dict]:
        """The job's events (docs/events.md), each a dict; with `follow`, as
        they come until the job ends."""
        argv = [self._dlaunch, "events", self.name] + (["--follow"] if follow else [])
        for line in _lines(argv, self._env):
            if line.strip():
                yield json.loads(line)

    def logs(self, rank: Optional[int] = None, follow: bool = False,
             tail: Optional[int] = None, attempt: Optional[int] = None) -> Iterator[str]:
        """The ranks' output the record keeps, line by line (each line with its
        "[rank] " prefix unless `rank` is given); with `follow`, until the job ends."""
        argv = [self._dlaunch, "logs", self.name]
        if rank is not None:
            argv += ["--rank", str(rank)]
        if tail is not None:
            argv += ["--tail", str(tail)]
        if attempt is not None:
            argv += ["--attempt", str(attempt)]
        if follow:
            argv.append("--follow")
        yield from _lines(argv, self._env)

    def signal(self, sig: str) -> None:
        """`dlaunch signal JOB SIG`: USR1, USR2, TSTP, CONT to every rank, QUIT
        (stacks), or INT, TERM, HUP (which stop the job)."""
        self._verb("signal", self.name, sig)

    def stop(self, sig: str = "TERM") -> int:
        """Stops the job (`dlaunch stop`) and returns its exit status once its
        head has ended."""
        self._verb("stop", self.name, "--signal", sig)
        return self.wait()

    def stacks(self) -> str:
        """Every rank's stack, identical ones together (`dlaunch stacks`)."""
        return self._verb("stacks", self.name).stdout

    def recover(self) -> None:
        """A new head for a job whose head is gone (`dlaunch recover`): returns
        once every node is taken over; DlaunchError when the job cannot be (its
        --head-grace passed, it ran without one, its head is alive)."""
        self._verb("recover", self.name)


def start(command: Sequence[str], hosts: Optional[str] = None, options: Sequence[str] = (),
          job_id: Optional[str] = None, binary: Optional[str] = None,
          env: Optional[dict] = None, cwd: Optional[str] = None) -> Job:
    """Starts `command` as a detached job (`dlaunch -d [-H hosts] [options] command`)
    and returns it once every node is ready. `options` are dlaunch's own
    (e.g. ["-n", "4"], ["--max-restarts", "2"]). StartError if it could not
    start, with the status and report dlaunch gave."""
    argv = [_binary(binary), "-d"]
    if hosts is not None:
        argv += ["-H", hosts]
    if job_id is not None:
        argv += ["--job-id", job_id]
    argv += list(options)
    argv += ["--", *command]  # the program, whatever it is called
    r = _run(argv, env, cwd)
    if r.returncode != 0:
        raise StartError(argv, r.returncode, r.stderr)
    return Job(r.stdout.strip(), binary=argv[0], env=env)


def job(name: str = "last", binary: Optional[str] = None, env: Optional[dict] = None) -> Job:
    """A job already started (by name, id or "last"), from any process of this user."""
    return Job(name, binary=binary, env=env)


def jobs(all: bool = False, binary: Optional[str] = None,  # noqa: A002 (dlaunch ps --all)
         env: Optional[dict] = None) -> List[dict]:
    """`dlaunch ps --json`: the jobs whose head runs on this machine (`all`:
    every record, ended and lost ones too)."""
    argv = [_binary(binary), "ps", "--json"] + (["--all"] if all else [])
    r = _run(argv, env)
    if r.returncode != 0:
        raise DlaunchError(argv, r.returncode, r.stderr)
    return json.loads(r.stdout)
