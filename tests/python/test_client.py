"""The Python client (python/dlaunch) against the real dlaunch: real local
jobs on the two-node localhost hostfile, each test with a state home of its
own. $DLAUNCH names the dlaunch under test, $DLAUNCH_SOURCE_DIR the checkout."""

import os
import signal
import time

import pytest

import dlaunch

HOSTS = os.path.join(os.environ["DLAUNCH_SOURCE_DIR"], "hostfiles", "localhost.yaml")


@pytest.fixture(autouse=True)
def state_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    yield


def test_a_job_started_from_python_is_waited_for_and_its_events_and_logs_read():
    job = dlaunch.start(["sh", "-c", 'echo "hello from $RANK"; sleep 1; [ $RANK = 2 ] && exit 7; true'],
                        hosts=HOSTS, job_id="py-client")
    assert job.name == "py-client"
    assert job.status()["state"] == "running"
    assert job.wait() == 7
    status = job.status()
    assert status["state"] == "ended" and status["exit_status"] == 7
    types = [e["type"] for e in job.events()]
    assert types[0] == "start" and types[-1] == "end"
    assert types.count("rank_started") == 4
    exited = [e for e in job.events() if e["type"] == "rank_exited" and e["code"] == 7]
    assert [e["rank"] for e in exited] == [2]
    assert sorted(job.logs()) == sorted(f"[{r}] hello from {r}\n" for r in range(4))
    assert list(job.logs(rank=1)) == ["hello from 1\n"]
    assert [j["name"] for j in dlaunch.jobs(all=True)] == ["py-client"]


def test_events_are_followed_as_they_come_and_a_stop_ends_the_job():
    job = dlaunch.start(["sleep", "60"], hosts=HOSTS)
    seen = []
    for event in job.events(follow=True):
        seen.append(event["type"])
        if seen.count("rank_started") == 4:
            break  # closing the generator stops the follower, not the job
    assert job.status()["state"] == "running"
    started = time.monotonic()
    assert job.stop() == 128 + signal.SIGTERM
    assert time.monotonic() - started < 30
    assert [e["type"] for e in job.events()][-1] == "end"
    assert dlaunch.jobs() == []  # nothing running any more


def test_a_job_that_cannot_start_raises_with_dlaunchs_status_and_report():
    with pytest.raises(dlaunch.StartError) as bad:
        dlaunch.start(["true"], hosts="/nonexistent/hosts.yaml")
    assert bad.value.status == 2
    assert "/nonexistent/hosts.yaml" in bad.value.stderr
    with pytest.raises(dlaunch.DlaunchError) as missing:
        dlaunch.job("no-such-job").status()
    assert missing.value.status != 0


def test_a_job_whose_head_is_killed_is_recovered_and_waited_for():
    go = os.path.join(os.environ["XDG_STATE_HOME"], "go")
    job = dlaunch.start(["sh", "-c", f'while [ ! -e {go} ]; do sleep 0.1; done; exit 0'],
                        hosts=HOSTS, options=["--head-grace", "60"], job_id="py-recover")
    os.kill(job.status()["head_pid"], signal.SIGKILL)
    for _ in range(100):
        if job.status()["state"] == "lost":
            break
        time.sleep(0.05)
    assert job.status()["state"] == "lost"
    job.recover()
    assert job.status()["state"] == "running"
    open(go, "w").close()
    assert job.wait() == 0
    assert [e["type"] for e in job.events()].count("node_resumed") == 2
