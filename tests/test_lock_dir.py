"""The per-user lock directory on a shared node: where it is, its mode, and the directories it refuses."""
import os
import stat
import tempfile

import pytest

from specsweep.core import claims
from specsweep.core.errors import ServerError


def test_each_user_has_a_directory_of_their_own(tmp_path, monkeypatch):
    monkeypatch.delenv("SPECSWEEP_LOCK_DIR", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert claims.default_lock_dir() == tmp_path / "specsweep-locks"
    # a runtime dir this node does not have (a SLURM job inherits the submitting shell's): the temp dir, per uid
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "absent"))
    assert claims.default_lock_dir().name == f"specsweep-locks-{os.getuid()}"
    assert claims.default_lock_dir().parent == claims.Path(tempfile.gettempdir())
    monkeypatch.setenv("SPECSWEEP_LOCK_DIR", str(tmp_path / "mine"))
    assert claims.default_lock_dir() == tmp_path / "mine"


def test_the_directory_and_its_locks_are_private(lock_dir):
    old = os.umask(0)                # even a user whose umask opens everything
    try:
        claim = claims.try_claim("port-1")
    finally:
        os.umask(old)
    try:
        assert stat.S_IMODE(lock_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE((lock_dir / "port-1.lock").stat().st_mode) == 0o600
        assert claims.try_claim("port-1") is None          # held
    finally:
        claim.release()


def refusal(lock_dir) -> str:
    with pytest.raises(ServerError) as e:
        claims.try_claim("port-1")
    assert "\n" not in str(e.value)                      # one line, as the CLI and Snakemake scripts print it
    return str(e.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a directory to another user")
def test_a_directory_owned_by_another_user_is_refused(lock_dir):
    lock_dir.mkdir(mode=0o700)
    os.chown(lock_dir, 65534, 65534)
    assert refusal(lock_dir) == (f"lock directory {lock_dir} belongs to uid 65534, not to you (uid {os.getuid()}): "
                                 "remove it, or set SPECSWEEP_LOCK_DIR to a directory of your own")
    assert not (lock_dir / "port-1.lock").exists()


def test_a_symlink_is_refused_even_to_a_directory_of_ours(lock_dir, tmp_path):
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    lock_dir.symlink_to(tmp_path / "elsewhere")
    assert refusal(lock_dir) == (f"lock directory {lock_dir} is a symlink (to {tmp_path / 'elsewhere'}): remove it, "
                                 "or set SPECSWEEP_LOCK_DIR to a directory of your own")


def test_a_directory_other_users_can_open_is_refused(lock_dir):
    lock_dir.mkdir()
    lock_dir.chmod(0o755)
    assert refusal(lock_dir) == (f"lock directory {lock_dir} is open to other users (mode 755): run `chmod 700 "
                                 f"{lock_dir}`, or set SPECSWEEP_LOCK_DIR to a directory of your own")
    lock_dir.chmod(0o700)
    claims.try_claim("port-1").release()
