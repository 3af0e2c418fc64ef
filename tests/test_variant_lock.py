"""One trainer per variant (:mod:`reproduce.training.variant_lock`): the lock file names its
holder, and a second trainer is refused naming it."""

import json
import os

import pytest

from reproduce.training.variant_lock import VariantLock, VariantLockedError


def test_a_lock_file_left_by_a_longer_record_names_only_the_new_holder(tmp_path):
    """The lock file outlives its holder (the kernel frees the lock, not the file): taking it
    again replaces the old record whole, so that a refusal names the process that holds it now."""
    (tmp_path / "train.lock").write_text(json.dumps({"pid": 1, "host": "x" * 200}))
    with VariantLock(tmp_path):
        holder = json.loads((tmp_path / "train.lock").read_text())
        assert holder["pid"] == os.getpid()
        with pytest.raises(VariantLockedError, match=rf'"pid": {os.getpid()}'):
            with VariantLock(tmp_path):
                pass
