"""scripts/install.sh asks for room before pip starts: a full disk otherwise ends pip mid-install with "[Errno 28]
No space left on device" (a CI run died so). Only the refusal runs here; the install itself is CI's first step."""
import subprocess

from specsweep.core.paths import REPO


def _install(tmp_path, gib: str):
    env = {"PATH": "/usr/bin:/bin", "SPECSWEEP_VENV": str(tmp_path / "new" / ".venv"), "SPECSWEEP_INSTALL_GIB": gib}
    return subprocess.run(["bash", str(REPO / "scripts" / "install.sh")], env=env, capture_output=True, text=True,
                          timeout=60)


def test_install_refuses_in_one_line_where_the_disk_lacks_room(tmp_path):
    got = _install(tmp_path, str(10**9))       # more than any disk has
    assert got.returncode == 1
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1, got.stderr
    assert f"GiB free under {tmp_path}, the install needs about {10**9} GiB" in lines[0]
    assert "SPECSWEEP_VENV" in lines[0]
    assert not (tmp_path / "new").exists()     # nothing made before the refusal


def test_install_refuses_a_room_that_is_not_a_whole_number(tmp_path):
    got = _install(tmp_path, "1.5")
    assert got.returncode == 2
    assert got.stderr.strip() == "SPECSWEEP_INSTALL_GIB must be a whole number of GiB, not '1.5'"
