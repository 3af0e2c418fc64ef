"""Fault injection on training (issue 14): every fault ends with the same final model as an
uninterrupted run, or with a one-line refusal, and nothing already computed is lost.

Real processes are killed (kill -9, SIGTERM, the death of their parents), real files damaged, a
real pickle crafted; the models are compared bit for bit with one straight run.
"""

import contextlib
import hashlib
import json
import os
import random
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from reproduce.experiment_file import load_experiment
from reproduce.provenance import trained_settings
from reproduce.decoding.translate import load_model
from reproduce.training.checkpoints import (CheckpointError, check_room, list_checkpoints,
                                            load_checkpoint, set_aside, sidecar_path)
from reproduce.training.launch import launch_training
from reproduce.training.assembly import build_trainer
from reproduce.training.trainer import checkpoint_bytes
from reproduce.training.variant_lock import VariantLock, VariantLockedError
from tests.training_fixtures import TINY, ROOT, corpus_pair, small_variant
from tests.training_fixtures import one_torch_thread  # noqa: F401 (autouse: one torch thread)

STEPS = 12
PYTHON = sys.executable
ENVIRONMENT = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    return corpus_pair(tmp_path_factory.mktemp("corpora"), 400)


@pytest.fixture(scope="module")
def straight(corpora, tmp_path_factory):
    """The uninterrupted run every faulty one must end equal to."""
    folder = tmp_path_factory.mktemp("straight")
    build_trainer(small_variant(steps=STEPS), TINY, *corpora, folder).run()
    return _model_digest(folder)


def _model_digest(folder: Path) -> str:
    model = load_checkpoint(folder / "train/final.pt")["model"]
    digest = hashlib.sha256()
    for name in sorted(model):
        digest.update(name.encode() + model[name].numpy().tobytes())
    return digest.hexdigest()


def _curve(folder: Path) -> list:
    rows = [json.loads(line) for line in (folder / "train/metrics.jsonl").read_text().splitlines()]
    return [(row["step"], row.get("train_loss"), row.get("dev_loss")) for row in rows]


def _trainer_process(corpora, folder: Path, steps: int, launch: bool = False,
                     launcher: str = "inline", tasks: int = 1) -> list[str]:
    """A command that trains ``small_variant(steps)`` into ``folder``: the Trainer alone, or,
    with ``launch``, ``launcher`` (lock, stop signals, MLflow) with ``tasks`` ranks."""
    train, dev = corpora
    if launch:
        body = ("from reproduce.experiment_file import load_experiment; "
                "from reproduce.training.launch "
                "import launch_training; "
                f"launch_training(load_experiment({str(ROOT / 'configs/tiny.yaml')!r}), "
                f"small_variant(steps={steps}), Path({str(train)!r}), Path({str(dev)!r}), "
                f"Path({str(folder)!r}), Path({str(folder)!r}), launcher={launcher!r}, "
                f"tasks={tasks})")
    else:
        body = (f"from reproduce.training.assembly import build_trainer; "
                f"build_trainer(small_variant(steps={steps}), TINY, Path({str(train)!r}), "
                f"Path({str(dev)!r}), Path({str(folder)!r})).run()")
    script = f"import torch; torch.set_num_threads(1); from pathlib import Path; " \
             f"from tests.training_fixtures import TINY, small_variant; {body}"
    return [PYTHON, "-c", script]


def _wait_for(condition, what: str, timeout: float = 300.0) -> None:  # a safety net only
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _holder_pid(folder: Path) -> int | None:
    try:
        return json.loads((folder / "train.lock").read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text()


# -- kill -9 -----------------------------------------------------------------------------------
def test_kill_9_at_random_points_then_resume_gives_the_uninterrupted_model(corpora, straight,
                                                                           tmp_path):
    """Three trainers killed at random moments (mid-step or mid-write), then a fourth finishes."""
    chooser = random.Random(14)
    # Long enough that every kill lands inside training: a process lives until its first new
    # checkpoint (every 3 steps) and up to 0.6 s more, and this machine trains ~60 steps a
    # second (90 steps were too few for three such lives)
    steps = 300
    long_straight = tmp_path / "long_straight"
    build_trainer(small_variant(steps=steps), TINY, *corpora, long_straight).run()
    folder = tmp_path / "killed"
    for _ in range(3):
        before = _newest_step(folder)
        process = subprocess.Popen(_trainer_process(corpora, folder, steps), env=ENVIRONMENT)
        _wait_for(lambda before=before: _newest_step(folder) > before, "a new checkpoint")
        time.sleep(chooser.uniform(0.0, 0.6))
        process.kill()
        process.wait()
    assert not (folder / "train/final.pt").exists() and _newest_step(folder) < steps
    build_trainer(small_variant(steps=steps), TINY, *corpora, folder).run()
    assert _model_digest(folder) == _model_digest(long_straight)
    assert _curve(folder) == _curve(long_straight)


def _newest_step(folder: Path) -> int:
    return max((int(path.stem.removeprefix("step_"))
                for path in list_checkpoints(folder / "checkpoints")), default=0)


# -- damaged newest checkpoint -----------------------------------------------------------------
def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _empty(path):
    path.write_bytes(b"")


def _zero_64_kib_in_the_middle(path):
    data = bytearray(path.read_bytes())
    middle = len(data) // 2 - 32 * 1024
    assert middle > 0
    data[middle : middle + 64 * 1024] = bytes(64 * 1024)
    path.write_bytes(bytes(data))


def _drop_marker(path):
    sidecar_path(path).unlink()


@pytest.mark.parametrize("damage", [_truncate, _empty, _zero_64_kib_in_the_middle, _drop_marker])
def test_a_damaged_newest_checkpoint_is_skipped_for_the_previous_one(corpora, straight, tmp_path,
                                                                     damage, caplog):
    folder = tmp_path / "run"
    build_trainer(small_variant(steps=STEPS), TINY, *corpora, folder).run(stop_after_steps=9)
    newest = list_checkpoints(folder / "checkpoints")[-1]
    assert newest.name == "step_00000009.pt"
    damage(newest)
    trainer = build_trainer(small_variant(steps=STEPS), TINY, *corpora, folder)
    assert trainer.step == 6
    assert f"skipping checkpoint {newest}" in caplog.text
    trainer.run()
    assert _model_digest(folder) == straight


def test_a_folder_where_no_checkpoint_verifies_is_refused(corpora, tmp_path):
    folder = tmp_path / "run"
    build_trainer(small_variant(steps=STEPS), TINY, *corpora, folder).run(stop_after_steps=3)
    _empty(list_checkpoints(folder / "checkpoints")[0])
    with pytest.raises(CheckpointError,
                       match=r"none of its 1 checkpoints verifies; start over with .*--restart"):
        build_trainer(small_variant(steps=STEPS), TINY, *corpora, folder)


# -- stop signals, parents' death, a second trainer ---------------------------------------------
def test_sigterm_saves_a_checkpoint_refuses_a_second_trainer_and_resumes_exactly(corpora, straight,
                                                                                 tmp_path):
    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    folder = tmp_path / "variant"
    # The launcher logs to MLflow at every logged step: SIGTERM lands long before the end.
    steps = 400
    process = subprocess.Popen(_trainer_process(corpora, folder, steps, launch=True),
                               env=ENVIRONMENT, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: list_checkpoints(folder / "checkpoints"), "a first checkpoint")
    with pytest.raises(VariantLockedError,
                       match=rf"train.lock: another trainer is writing this variant "
                             rf"\(.*\"pid\": {process.pid}"):
        launch_training(experiment, small_variant(steps=steps), *corpora, folder, folder)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    stopped = load_checkpoint(list_checkpoints(folder / "checkpoints")[-1])
    assert f"training stopped at step {stopped['step']} (received SIGTERM)" in stderr
    assert "KILLED" in _run_status(folder)
    reference = tmp_path / "reference"
    build_trainer(small_variant(steps=stopped["step"] + 3), TINY, *corpora, reference).run()
    build_trainer(small_variant(steps=stopped["step"] + 3), TINY, *corpora, folder).run()
    assert _model_digest(folder) == _model_digest(reference)


def test_the_pre_timeout_signal_saves_a_checkpoint_and_submitit_requeues(corpora, tmp_path):
    """submitit's local executor runs the task as Slurm would, and requeues it when the task exits
    through submitit's handler; USR2 is the signal Slurm sends before the time limit."""
    from concurrent.futures import ThreadPoolExecutor

    experiment = load_experiment(ROOT / "configs/tiny.yaml")
    folder, steps = tmp_path / "variant", 60
    with ThreadPoolExecutor(1) as pool:
        launched = pool.submit(launch_training, experiment, small_variant(steps=steps), *corpora,
                               folder, folder, launcher="local", tasks=1)
        _wait_for(lambda: list_checkpoints(folder / "checkpoints") and _holder_pid(folder),
                  "a first checkpoint")
        os.kill(_holder_pid(folder), signal.SIGUSR2)
        summary = launched.result(timeout=300)
    assert summary["steps"] == steps
    log = "".join(path.read_text() for path in (folder / "submitit").glob("*_log.err"))
    stop = log[log.index("training stopped at step "):].split()[4]
    assert ("(received SIGUSR2); its checkpoint resumes it" in log
            and "Requeued job" in log), log[-3000:]
    assert f"resumed from {folder / 'checkpoints'}/step_{int(stop):08d}.pt at step {stop}" in log
    reference = tmp_path / "reference"
    build_trainer(small_variant(steps=steps), TINY, *corpora, reference).run()
    assert _model_digest(folder) == _model_digest(reference)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP], ids=["SIGINT", "SIGHUP"])
def test_ctrl_c_or_a_closed_terminal_stops_the_local_ranks_with_a_checkpoint(corpora, tmp_path,
                                                                             signum):
    """The local launcher run by hand in a terminal: Ctrl-C (SIGINT) or the terminal closing
    (SIGHUP) signals its whole process group, the executor's controller and ranks included.
    The ranks stop after their step with a checkpoint, sent SIGTERM by the launcher, which waits
    for them and fails in one line; no process of the group is left."""
    folder = tmp_path / "variant"
    launcher = _local_launcher(corpora, folder, stderr=subprocess.PIPE)
    try:
        _wait_for(lambda: list_checkpoints(folder / "checkpoints") and _holder_pid(folder),
                  "a first checkpoint")
        os.killpg(launcher.pid, signum)
        _, stderr = launcher.communicate(timeout=120)
        with pytest.raises(ProcessLookupError):
            os.killpg(launcher.pid, 0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launcher.pid, signal.SIGKILL)
    assert launcher.returncode != 0
    assert re.search(r"training job \d+ stopped before its last step; its checkpoint resumes "
                     r"it", stderr), stderr[-3000:]
    _assert_rank_0_stopped_with_a_checkpoint(folder, r"received SIGTERM")


def _local_launcher(corpora, folder: Path, stderr) -> subprocess.Popen:
    """The local launcher with 2 ranks run by hand, leading a process group of its own (as a
    terminal's foreground group), its steps enough to last until it is stopped."""
    return subprocess.Popen(_trainer_process(corpora, folder, 2000, launch=True,
                                             launcher="local", tasks=2),
                            env=ENVIRONMENT, stderr=stderr, text=True, start_new_session=True)


def _assert_rank_0_stopped_with_a_checkpoint(folder: Path, reason: str) -> None:
    """Rank 0's log says it stopped for ``reason`` (a pattern), its newest checkpoint is of the
    step it stopped at, and its MLflow run is KILLED."""
    log = "".join(path.read_text() for path in (folder / "submitit").glob("*_0_log.err"))
    stopped = re.search(r"training stopped at step (\d+) \(" + reason + r"\); its checkpoint "
                        r"resumes it", log)
    assert stopped, log[-3000:]
    assert load_checkpoint(list_checkpoints(folder / "checkpoints")[-1])["step"] == \
        int(stopped.group(1))
    assert "KILLED" in _run_status(folder)


@pytest.mark.slow
def test_a_killed_local_launcher_stops_its_ranks_with_a_checkpoint(corpora, tmp_path):
    """kill -9 to the local launcher run by hand leaves the executor's controller and ranks
    behind, orphaned, with no signal: rank 0 sees the launcher gone, and the ranks stop after
    their step with a checkpoint and release the lock; no process of the group is left."""
    folder = tmp_path / "variant"
    launcher = _local_launcher(corpora, folder, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: list_checkpoints(folder / "checkpoints") and _holder_pid(folder),
                  "a first checkpoint")
        launcher.kill()
        killed = time.monotonic()
        launcher.wait()
        _wait_for(lambda: not _live_members(launcher.pid), "the orphaned ranks to exit")
        print(f"the launcher's group gone {time.monotonic() - killed:.1f} s after its kill -9")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launcher.pid, signal.SIGKILL)
    _assert_rank_0_stopped_with_a_checkpoint(
        folder, rf"process {launcher.pid}, which started this training, exited")
    with VariantLock(folder):  # released: the next trainer may start at once
        pass


def _live_members(group: int) -> list[int]:
    """The processes of process group ``group`` that have not ended (zombies have)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            state, _, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
            if int(pgrp) == group and state not in "ZX":
                members.append(int(stat.parent.name))
    return members


def _run_status(folder: Path) -> str:
    from mlflow.tracking import MlflowClient

    run_id = (folder / "checkpoints/mlflow_run_id").read_text().strip()
    return MlflowClient(f"sqlite:///{folder / 'mlflow.db'}").get_run(run_id).info.status


@pytest.mark.parametrize("killed, reason", [
    ("snakemake", r"process \d+, which started the shell \d+, exited\)"),
    ("bash", r"received SIGTERM\)"),  # the kernel's parent-death signal
])
def test_the_trainer_dies_with_the_job_that_started_it(corpora, tmp_path, killed, reason):
    """snakemake -> bash -c '...; python' -> trainer: kill -9 Snakemake's stand-in (bash stays
    behind, reparented) or the rule's bash; the trainer checkpoints and exits either way."""
    folder = tmp_path / "variant"
    trainer = shlex.join(_trainer_process(corpora, folder, 2000, launch=True))
    job = subprocess.Popen([PYTHON, "-c", "import subprocess, sys; subprocess.run(sys.argv[1:])",
                            "bash", "-c",
                            f"set -euo pipefail; {trainer} 2> {folder.parent / 'train.log'}"],
                           env=ENVIRONMENT, start_new_session=True)
    try:
        _wait_for(lambda: list_checkpoints(folder / "checkpoints") and _holder_pid(folder),
                  "a first checkpoint")
        pid = _holder_pid(folder)
        if killed == "snakemake":
            job.kill()
            job.wait()
        else:
            os.kill(int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]),
                    signal.SIGKILL)
        _wait_for(lambda: not _alive(pid), "the orphaned trainer to exit")
    finally:
        with contextlib.suppress(ProcessLookupError):  # whatever is left of the job
            os.killpg(job.pid, signal.SIGKILL)
    log = (folder.parent / "train.log").read_text()
    assert re.search(r"training stopped at step (\d+) \(" + reason
                     + "; its checkpoint resumes it", log), log[-2000:]
    stopped = int(re.search(r"training stopped at step (\d+)", log).group(1))
    assert load_checkpoint(list_checkpoints(folder / "checkpoints")[-1])["step"] == stopped
    with VariantLock(folder):  # released: the next trainer may start at once
        pass


# -- settings edits ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def nine_steps(corpora, tmp_path_factory):
    """A run of small_variant(steps=9), finished (final.pt written)."""
    folder = tmp_path_factory.mktemp("nine")
    build_trainer(small_variant(steps=9), TINY, *corpora, folder).run()
    return folder


def _copy(folder: Path, into: Path) -> Path:
    shutil.copytree(folder, into)
    return into


@pytest.mark.parametrize("changes, named", [
    ({"dropout": 0.2, "warmup_steps": 20},
     r"model.dropout: 0.1 -> 0.2; training.warmup_steps: 10 -> 20"),
    ({"tokens_per_step": 240}, r"training.tokens_per_step: 300 -> 240"),
    ({"precision": "fp16"}, r"training.precision: 'fp32' -> 'fp16'"),  # no two arithmetics in a run
    ({"clip_norm": 1.0}, r"training.clip_norm: None -> 1.0"),
    ({"steps": 6},
     r"already at step 9, beyond training.steps = 6; only raising steps continues a run"),
])
def test_edited_settings_are_refused_with_the_differing_keys(corpora, nine_steps, tmp_path, changes,
                                                             named):
    folder = _copy(nine_steps, tmp_path / "run")
    variant = small_variant(**{"steps": 9} | changes)
    with pytest.raises(CheckpointError,
                       match=named + r".*run `reproduce train` again with --restart"):
        build_trainer(variant, TINY, *corpora, folder)
    if "steps" not in changes:  # decoding refuses a model of other settings too
        with pytest.raises(CheckpointError, match=r"final.pt: trained with other settings"):
            load_model(folder / "train/final.pt", expected_settings=trained_settings(variant, TINY))
    replaced = set_aside(folder)  # what --restart does: the old run moves aside, whole
    assert sorted(p.name for p in replaced.iterdir()) == ["checkpoints", "train"]
    assert build_trainer(variant, TINY, *corpora, folder).step == 0


def test_raising_steps_continues_the_run_to_the_uninterrupted_model(corpora, nine_steps, straight,
                                                                    tmp_path):
    folder = _copy(nine_steps, tmp_path / "run")
    trainer = build_trainer(small_variant(steps=STEPS), TINY, *corpora, folder)
    assert trainer.step == 9  # goes on from step 9 (a fresh start would end equal too)
    trainer.run()
    assert _model_digest(folder) == straight


# -- files that would run code, full disks, unwritable folders ----------------------------------
class _WritesAFile:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def test_a_crafted_pickle_is_refused_and_runs_nothing(tmp_path):
    proof = tmp_path / "code_ran"
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    evil = folder / "step_00000001.pt"
    torch.save({"model": {}, "payload": _WritesAFile(proof)}, evil)
    digest = hashlib.sha256(evil.read_bytes()).hexdigest()
    sidecar_path(evil).write_text(digest + "  step_00000001.pt\n")
    result = subprocess.run([PYTHON, "-m", "reproduce", "average", "--checkpoint-dir", str(folder),
                             "--last", "1", "--out", str(tmp_path / "averaged.pt")],
                            env=ENVIRONMENT, capture_output=True, text=True)
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line == (f"reproduce average: error: {evil}: refused: it holds objects other than "
                         "tensors and plain values, which could run code when loaded"), \
        result.stderr
    assert "Traceback" not in result.stderr
    assert not proof.exists() and not (tmp_path / "averaged.pt").exists()


def _file_size_limit(limit: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # fail the write (EFBIG) instead of dying
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_a_full_disk_is_one_line_naming_the_path_and_leaves_no_tmp(nine_steps, tmp_path):
    """RLIMIT_FSIZE makes the write fail as a full disk does, halfway through the file."""
    out = tmp_path / "out" / "averaged.pt"
    out.parent.mkdir()
    result = subprocess.run([PYTHON, "-m", "reproduce", "average", "--checkpoint-dir",
                             str(nine_steps / "checkpoints"), "--last", "2", "--out", str(out)],
                            env=ENVIRONMENT, capture_output=True, text=True,
                            preexec_fn=_file_size_limit(20_000))
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].startswith(f"reproduce average: error: {out}: "
                                                             "cannot write ("), result.stderr
    assert "Traceback" not in result.stderr
    assert list(out.parent.iterdir()) == []


def test_an_unwritable_or_small_folder_is_refused_before_training(corpora, tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(CheckpointError,
                       match=rf"^{blocker}/variant/checkpoints: not writable \(Not a directory\)$"):
        build_trainer(small_variant(steps=3), TINY, *corpora, blocker / "variant").run()
    trainer = build_trainer(small_variant(steps=3), TINY, *corpora, tmp_path / "variant")
    free = 5 * checkpoint_bytes(trainer.model)  # keep_last (5) + 2 are needed
    monkeypatch.setattr("shutil.disk_usage", lambda path: type("Usage", (), {"free": free})())
    with pytest.raises(CheckpointError,
                       match=r"checkpoints: \d+ MiB free, but 7 checkpoints of about"):
        trainer.run()
    assert list((tmp_path / "variant/checkpoints").iterdir()) == []
    # Room for 5: passes.
    check_room(tmp_path / "variant/checkpoints", checkpoint_bytes(trainer.model), 5)
