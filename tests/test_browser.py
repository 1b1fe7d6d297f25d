"""TensorBoard in a real headless Chromium, offline: the pages a learner opens after a check.

Screenshots go to the test's temporary folder; ``python tests/browser.py``
regenerates the ones the docs show. In CI (``CI`` set) a missing browser is a
failure, not a skip: ``tests/run.sh`` installs Debian's chromium.
"""

from __future__ import annotations

import os

import pytest

import browser
from proflab.viewing import tensorboard
from test_tensorboard import free_port

if not browser.available():
    if os.environ.get("CI"):
        raise RuntimeError("CI needs Debian's chromium, chromium-driver and selenium: see tests/run.sh")
    pytest.skip("Debian's chromium and chromium-driver are not installed (tests/run.sh installs them)",
                allow_module_level=True)


def test_scalars_text_images_timeline_and_profile_render_offline(kit, solution_check, tmp_path):
    code, _ = solution_check
    assert code == 0
    port = free_port()
    proc = tensorboard.start(kit.root / "runs", port=port)
    try:
        shots = browser.tensorboard_screenshots(f"http://127.0.0.1:{port}", tmp_path)
    finally:
        tensorboard.stop(proc)
    assert [p.name for p in shots] == ["tensorboard-scalars.png", "tensorboard-text.png", "tensorboard-images.png",
                                      "tensorboard-trace-timeline.png", "tensorboard-profile-overview.png",
                                      "tensorboard-profile-operators.png", "tensorboard-profile-diff.png"]
    for shot in shots:
        data = shot.read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 20_000, f"{shot.name} looks empty"
