"""The GPU lane: llama.cpp's Vulkan backend on a real Vulkan device (Mesa's llvmpipe in CI).

These tests need a llama-cpp-python built with ``SPECCHAT_BACKEND=vulkan`` and a Vulkan device,
so they run only in ``.ci/run``'s GPU lane (``SPECCHAT_GPU_TESTS=1`` in ``.venv-vulkan``). In the
main suite (the CPU build) each is skipped with that reason. In the lane nothing is skipped: a
build without Vulkan, or no Vulkan device, fails every test.
"""

from __future__ import annotations

import os

import pytest

GPU_LANE = os.environ.get("SPECCHAT_GPU_TESTS") == "1"
if GPU_LANE:
    # llama.cpp's Vulkan backend leaves out CPU-type devices (llvmpipe) unless they are named
    os.environ.setdefault("GGML_VK_VISIBLE_DEVICES", "0")
    # fused kernels crash Mesa 22.3's llvmpipe on 3-token batches (docs/gpu.md)
    os.environ.setdefault("GGML_VK_DISABLE_FUSION", "1")

_HERE = os.path.dirname(os.path.abspath(__file__))
_WHY = (
    "GPU lane only: needs a Vulkan build of llama-cpp-python and a Vulkan device "
    "(packaging/gpu-lane.sh runs tests/gpu with SPECCHAT_GPU_TESTS=1 in .venv-vulkan)"
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if GPU_LANE:
        return
    skip = pytest.mark.skip(reason=_WHY)
    for item in items:
        if str(item.path).startswith(_HERE + os.sep):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def vulkan_device():
    """The Vulkan device llama.cpp will use (fails, never skips, when there is none)."""
    from specchat.core.machine.backend_choice import installed_backends
    from specchat.core.machine.backend_info import list_devices

    built = installed_backends() or frozenset()
    if "vulkan" not in built:
        pytest.fail(f"llama-cpp-python here is built for {sorted(built)}, not Vulkan")
    devices = [d for d in list_devices() if d.backend.lower() == "vulkan"]
    if not devices:
        pytest.fail("llama.cpp's Vulkan backend lists no device (vulkaninfo --summary?)")
    return devices[0]
