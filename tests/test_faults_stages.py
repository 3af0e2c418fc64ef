"""Fault injection on every stage that writes files (download, prepare, references, train-bpe,
encode, train, average, decode, score, summarize, attention, tables; the treebank's download,
prepare and gold trees): kill -9, a full disk, a read-only output folder, stop signals, and
damaged files a stage reads.

Each stage runs as the pipeline runs it, ``python -m reproduce <command>``, on the inputs of one
straight run of the whole tiny pipeline (:mod:`tests.stage_pipeline`), writing into a fresh
results root; its outputs are then compared with the straight run's, byte for byte (a model by
its tensors). What every fault must leave: under a final name only a file equal to the straight
run's (atomic writes: a partial file lives under ``.tmp``/``.part`` alone), one line
``reproduce <command>: error: ...`` naming the path and no traceback when the command reports
the fault, and a rerun that ends with the straight run's outputs.
"""

from __future__ import annotations

import random
import re
import resource
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from reproduce.training.checkpoints import sidecar_path
from tests.stage_pipeline import (ENVIRONMENT, ROOT, STAGES, Stage, build_pipeline, digests,
                                  final_named_files, model_digest, run_stage, tensors_digest)

CHOOSER_SEED = 2017
# Stages that take more than a moment get several kills at random moments.
RANDOM_KILLS = {"train": 3, "decode": 2, "score": 2, "attention": 2, "tables": 2}
LONG_RUNNING = ("train", "decode", "score", "attention", "tables")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """(experiment file, results root) of the straight run."""
    experiment, results = build_pipeline(tmp_path_factory.mktemp("straight"))
    return experiment, results


def _expected(stage: Stage, results: Path) -> dict[str, str]:
    expected = digests(stage, results)
    assert expected, "the straight run wrote nothing to compare with"
    return expected


def _assert_nothing_partial(stage: Stage, expected: dict[str, str], out: Path) -> None:
    """Every file under a final name is one of the straight run's results, equal to it. A
    checkpoint is committed by its checksum sidecar, written after it
    (:func:`reproduce.training.checkpoints.save_checkpoint`): the sidecar is checked along with
    it, and a checkpoint killed between the two, which every reader refuses as incomplete, must
    still hold the straight run's tensors."""
    checkpoints = stage.digest is model_digest
    for path in final_named_files(out):
        name = str(path.relative_to(out))
        if checkpoints and path.suffix == ".sha256" and name.removesuffix(".sha256") in expected:
            continue  # its checkpoint's marker, checked when the checkpoint is loaded
        assert name in expected, f"{name}: written under a final name, not a result of the stage"
        if checkpoints and not sidecar_path(path).exists():
            digest = tensors_digest(torch.load(path, weights_only=True)["model"])
        else:
            digest = stage.digest(path)
        assert digest == expected[name], f"{name}: partial or different"


def _assert_rerun_gives_the_straight_result(stage, experiment, results, out) -> None:
    done = run_stage(stage, experiment, results, out)
    assert done.returncode == 0, done.stderr[-3000:]
    assert digests(stage, out) == _expected(stage, results)


def _error_line(done: subprocess.CompletedProcess, command: str) -> str:
    """The one line a reported fault ends with (no traceback)."""
    assert done.returncode != 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if ": error: " in line]
    assert len(lines) == 1 and done.stderr.rstrip("\n").endswith(lines[0]), done.stderr[-2000:]
    assert lines[0].startswith(f"reproduce {command}: error: "), lines[0]
    return lines[0]


def _start(stage: Stage, experiment: Path, results: Path, out: Path,
           environment: dict[str, str] = ENVIRONMENT) -> subprocess.Popen:
    return subprocess.Popen(stage.argv(experiment, results, out), env=environment, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _first_write(out: Path, process: subprocess.Popen) -> bool:
    """Wait until the process has created a file under ``out`` (or ended): its first write."""
    while process.poll() is None:
        if out.exists() and any(path.is_file() for path in out.rglob("*")):
            return True
        time.sleep(0.002)
    return False


# -- kill -9 -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", STAGES)
def test_kill_9_at_its_first_write_and_at_random_moments_then_rerun(pipeline, tmp_path, name):
    """kill -9 as soon as the stage creates its first file, then (the long stages) at seeded
    random moments of its run: after each, nothing partial under a final name; a rerun then
    ends with the straight run's bytes (training: the same model)."""
    experiment, results = pipeline
    stage, out = STAGES[name], tmp_path / "results"
    expected = _expected(stage, results)
    process = _start(stage, experiment, results, out)
    assert _first_write(out, process), "the stage ended before it wrote anything"
    process.kill()
    process.communicate()
    _assert_nothing_partial(stage, expected, out)
    chooser = random.Random(f"{CHOOSER_SEED}-{name}")
    for _ in range(RANDOM_KILLS.get(name, 0)):
        started = time.monotonic()
        process = _start(stage, experiment, results, out)
        assert _first_write(out, process) or process.returncode is None
        time.sleep(chooser.uniform(0.0, 1.5))
        assert process.poll() is None, f"ended {time.monotonic() - started:.1f} s in, unkilled"
        process.kill()
        process.communicate()
        _assert_nothing_partial(stage, expected, out)
    _assert_rerun_gives_the_straight_result(stage, experiment, results, out)


# -- a full disk -------------------------------------------------------------------------------
def _file_size_limit(limit: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # fail the write (EFBIG) instead of dying
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


@pytest.mark.parametrize("name", STAGES)
def test_a_full_disk_is_one_line_naming_the_path_and_a_rerun_with_room_succeeds(
        pipeline, tmp_path, name):
    """``RLIMIT_FSIZE`` at half the smallest result makes a write fail halfway, as a full disk
    does."""
    experiment, results = pipeline
    stage, out = STAGES[name], tmp_path / "results"
    expected = _expected(stage, results)
    limit = min((results / path).stat().st_size for path in expected) // 2
    done = run_stage(stage, experiment, results, out, preexec_fn=_file_size_limit(limit))
    line = _error_line(done, stage.command)
    # The path is the file being written: an output, or a scratch copy of an archive's member.
    assert re.search(r"error: (MLflow store )?/\S+: .*(cannot write|disk I/O error)", line), line
    _assert_nothing_partial(stage, expected, out)
    _assert_rerun_gives_the_straight_result(stage, experiment, results, out)


# -- a read-only output folder -----------------------------------------------------------------
@pytest.mark.parametrize("name", STAGES)
def test_a_read_only_output_folder_is_one_line_naming_it(pipeline, tmp_path, name):
    """The folder the stage writes into exists, read-only; the command runs without root's
    CAP_DAC_OVERRIDE (``setpriv``), which would let it write anyway."""
    experiment, results = pipeline
    stage, out = STAGES[name], tmp_path / "results"
    folder = (out / stage.results[0]).parent
    folder.mkdir(parents=True)
    folder.chmod(0o555)
    try:
        done = subprocess.run(["setpriv", "--inh-caps=-dac_override",
                               "--bounding-set=-dac_override", *stage.argv(experiment, results,
                                                                           out)],
                              env=ENVIRONMENT, cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
    finally:
        folder.chmod(0o755)
    line = _error_line(done, stage.command)
    assert f"error: {folder}" in line and "Permission denied" in line, line
    assert final_named_files(folder) == []


# -- stop signals ------------------------------------------------------------------------------
@pytest.mark.parametrize("signum", STOP_SIGNALS, ids=lambda signum: signum.name)
@pytest.mark.parametrize("name", LONG_RUNNING)
def test_a_stop_signal_ends_the_command_cleanly_and_a_rerun_gives_the_same_result(
        pipeline, tmp_path, name, signum):
    """SIGTERM (kill, Slurm, a dying parent), SIGINT (Ctrl-C), SIGHUP (a closed terminal) at a
    seeded random moment: exit 128 + the signal, no traceback, nothing partial."""
    experiment, results = pipeline
    stage, out = STAGES[name], tmp_path / "results"
    expected = _expected(stage, results)
    process = _start(stage, experiment, results, out)
    time.sleep(random.Random(f"{CHOOSER_SEED}-{name}-{signum}").uniform(0.3, 1.0))
    assert process.poll() is None, "ended before the signal"
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode in (128 + signum, -signum), (process.returncode, stderr[-2000:])
    assert "Traceback" not in stderr, stderr[-3000:]
    _assert_nothing_partial(stage, expected, out)
    _assert_rerun_gives_the_straight_result(stage, experiment, results, out)


# Modules the score command imports on its way, each followed by more: the CLI's own, numpy
# (which torch imports while catching errors), and MLflow (a second of imports).
INTERRUPTED_IMPORTS = ("reproduce.config", "numpy.version", "mlflow.version")


@pytest.mark.parametrize("module", INTERRUPTED_IMPORTS)
def test_ctrl_c_in_the_middle_of_an_import_ends_the_command_cleanly(pipeline, tmp_path, module):
    """Ctrl-C just after ``module`` is imported (Python's import-time report says when), so while
    the imports around it run: the process ends by the signal, with no traceback and nothing
    partial. Raised there as a KeyboardInterrupt, it would leave a C extension half initialised,
    and the command would fail with an unrelated error or carry on."""
    experiment, results = pipeline
    stage, out = STAGES["score"], tmp_path / "results"
    expected = _expected(stage, results)
    process = _start(stage, experiment, results, out,
                     environment={**ENVIRONMENT, "PYTHONPROFILEIMPORTTIME": "1"})
    for line in process.stderr:
        if line.startswith("import time:") and line.split("|")[-1].strip() == module:
            process.send_signal(signal.SIGINT)
            break
    else:
        pytest.fail(f"the score command ended without importing {module}")
    _, stderr = process.communicate(timeout=120)
    lines = [line for line in stderr.splitlines() if not line.startswith("import time:")]
    assert process.returncode == -signal.SIGINT, (process.returncode, lines[-30:])
    assert "Traceback" not in stderr, lines[-30:]
    _assert_nothing_partial(stage, expected, out)
    _assert_rerun_gives_the_straight_result(stage, experiment, results, out)


# -- damaged files a stage reads ---------------------------------------------------------------
def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garbage(path: Path) -> None:
    path.write_bytes(random.Random(path.name).randbytes(path.stat().st_size))


def _tear_json(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-7])


def _change_marker(path: Path) -> None:
    marker = path.with_name(path.name + ".sha256")
    marker.write_text("0" * 64 + marker.read_text()[64:])


def _drop_last_line(path: Path) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]))


DAMAGES = {  # damaged file (under the inputs' results root), damage, stage that reads it
    "truncated encoded split": ("tiny/encoded/dev/target.bin", _truncate, "score"),
    "truncated encoded offsets": ("tiny/encoded/train/source_offsets.npy", _truncate, "train"),
    "torn encoded meta.json": ("tiny/encoded/train/meta.json", _tear_json, "train"),
    "torn checkpoints.json": ("tiny/base/train/checkpoints.json", _tear_json, "average"),
    "checkpoint marker changed": ("tiny/base/checkpoints/step_00000012.pt", _change_marker,
                                  "average"),
    "averaged.pt replaced by garbage": ("tiny/base/averaged.pt", _garbage, "decode"),
    "averaged.pt truncated (perplexity)": ("tiny/base/averaged.pt", _truncate, "score"),
    "averaged.pt marker changed (figures)": ("tiny/base/averaged.pt", _change_marker,
                                             "attention"),
    "truncated sentencepiece model": ("tiny/bpe/spm.model", _truncate, "encode"),
    "translations one line short": ("tiny/base/translations/dev.averaged.txt", _drop_last_line,
                                    "score"),
    "references one line short": ("tiny/data/dev.ref", _drop_last_line, "score"),
    "torn scores JSON": ("tiny/base/scores/dev.averaged.json", _tear_json, "summarize"),
    "truncated downloaded archive": ("tiny/downloads/corpus.tgz.*", _truncate,
                                     "prepare"),
}


@pytest.mark.parametrize("damaged, damage, name", DAMAGES.values(), ids=DAMAGES.keys())
def test_a_damaged_input_is_named_never_a_silent_wrong_result(pipeline, tmp_path, damaged,
                                                              damage, name):
    experiment, results = pipeline
    stage, inputs, out = STAGES[name], tmp_path / "inputs", tmp_path / "results"
    shutil.copytree(results, inputs, ignore=shutil.ignore_patterns("mlflow.db", "mlruns"))
    damaged = next(inputs.glob(damaged))
    damage(damaged)
    done = run_stage(stage, experiment, inputs, out)
    line = _error_line(done, stage.command)
    assert f"{inputs}/" in line and damaged.name in line, line
    assert digests(stage, out) == {}
