"""The repaired wheel (auditwheel) and the package installed from it in this environment:
a manylinux wheel that carries the C++ libraries it links (libjpeg-turbo, libpng, libcurl,
libxxhash, ...) and none of CUDA, NVML or nvJPEG (dlopened, optional); the installed
extension and command-line tool resolve every library inside the wheel except those
manylinux lets a wheel take from the system; `saturate` on the venv's PATH runs; and a new
venv without system site packages gets all it needs from `pip install WHEEL` (numpy from PyPI).

SATURATE_WHEEL names the wheel (scripts/python-env.sh builds and repairs it; scripts/test.sh
installs it into .venv and .venv-torch2 and runs this file in both). Without it the tests
skip, saying why: a build tree's package is not what users install.
"""

import base64
import hashlib
import importlib.metadata
import os
import re
import subprocess
import sys
import zipfile

import pytest

import saturate

# auditwheel's manylinux_2_35 policy (auditwheel/policy/manylinux-policy.json, the same for
# every manylinux_2_x): what a manylinux wheel may load from the system. Plus the loader
# itself and the kernel's vDSO, which are not files of any package.
ALLOWED = {
    "libGL.so.1", "libICE.so.6", "libSM.so.6", "libX11.so.6", "libXext.so.6", "libXrender.so.1",
    "libanl.so.1", "libatomic.so.1", "libc.so.6", "libdl.so.2", "libexpat.so.1", "libgcc_s.so.1",
    "libglib-2.0.so.0", "libgobject-2.0.so.0", "libgthread-2.0.so.0", "libm.so.6", "libmvec.so.1",
    "libnsl.so.1", "libpthread.so.0", "libresolv.so.2", "librt.so.1", "libstdc++.so.6",
    "libutil.so.1", "libz.so.1", "ld-linux-x86-64.so.2", "linux-vdso.so.1",
}
# Loaded with dlopen when a GPU is there; a wheel that linked or carried them would not
# install (or not load) on a machine without the NVIDIA driver and toolkit.
DLOPENED = re.compile(r"lib(cuda|cudart|nvidia-ml|nvjpeg|nvrtc|nvToolsExt)\b")
# What the engine links and the wheel must therefore carry.
BUNDLED = ("libjpeg", "libpng16", "libxxhash", "libcurl", "libhdf5_serial")


@pytest.fixture(scope="module")
def wheel():
    path = os.environ.get("SATURATE_WHEEL")
    if not path:
        pytest.skip("SATURATE_WHEEL is not set: no repaired wheel to check "
                    "(SATURATE_PIP_BUILD_DIR=build/ci scripts/python-env.sh makes one; CI sets it)")
    assert os.path.isfile(path), f"SATURATE_WHEEL={path} is not a file"
    return path


@pytest.fixture(scope="module")
def installed(wheel):
    """(package dir, distribution) of the saturate this interpreter imports, which must be
    the wheel's: each file's sha256 as the wheel's RECORD has it."""
    package = os.path.dirname(os.path.abspath(saturate.__file__))
    dist = importlib.metadata.distribution("saturate")
    site = os.path.abspath(str(dist.locate_file("")))
    assert os.path.realpath(package) == os.path.realpath(os.path.join(site, "saturate")), (
        f"saturate is imported from {package}, not from where the wheel installed it ({site}): "
        "PYTHONPATH points at a build tree?")
    with zipfile.ZipFile(wheel) as z:
        record = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
        rows = [line.split(",") for line in z.read(record).decode().splitlines() if line]
    checked = 0
    for name, digest, _ in rows:
        if not name.endswith(".so") and "/bin/" not in name and ".so." not in name:
            continue
        with open(os.path.join(site, name), "rb") as f:
            ours = base64.urlsafe_b64encode(hashlib.sha256(f.read()).digest()).rstrip(b"=")
        assert "sha256=" + ours.decode() == digest, f"{name} differs from the wheel's"
        checked += 1
    assert checked >= 2 + len(BUNDLED)
    return package, site


def ldd(path):
    """{soname: resolved path or None} of what the dynamic loader loads for PATH."""
    out = subprocess.run(["ldd", path], capture_output=True, text=True, check=True).stdout
    libs = {}
    for line in out.splitlines():
        line = line.strip()
        if "=>" in line:
            name, _, where = line.partition("=>")
            where = where.strip()
            libs[name.strip()] = None if where.startswith("not found") else where.split(" (")[0]
        elif line:
            path_ = line.split(" (")[0]
            libs[os.path.basename(path_)] = path_
    return libs


def test_wheel_is_manylinux_and_carries_its_libraries(wheel):
    name = os.path.basename(wheel)
    assert re.search(r"-manylinux_2_\d+_x86_64\.whl$", name), name
    with zipfile.ZipFile(wheel) as z:
        infos = {i.filename: i for i in z.infolist()}
    libs = [os.path.basename(n) for n in infos if n.startswith("saturate.libs/")]
    for lib in BUNDLED:
        assert any(b.startswith(lib + "-") for b in libs), (lib, libs)
    assert not [n for n in infos if DLOPENED.search(os.path.basename(n))]
    assert any(re.fullmatch(r"saturate/_core\.cpython-.*\.so", n) for n in infos)
    cli = infos["saturate/bin/saturate"]
    assert (cli.external_attr >> 16) & 0o111, "the bundled CLI lost its executable bit"
    entry_points = next(n for n in infos if n.endswith(".dist-info/entry_points.txt"))
    with zipfile.ZipFile(wheel) as z:
        assert "saturate = saturate.__main__:main" in z.read(entry_points).decode()


def test_installed_binaries_load_nothing_from_outside_the_wheel(installed):
    package, site = installed
    libs_dir = os.path.realpath(os.path.join(site, "saturate.libs"))
    binaries = [os.path.join(package, "bin", "saturate")]
    binaries += [os.path.join(package, n) for n in os.listdir(package)
                 if n.startswith("_core.") and n.endswith(".so")]
    assert len(binaries) == 2
    for binary in binaries:
        libs = ldd(binary)
        missing = [n for n, p in libs.items() if p is None]
        assert not missing, f"{binary}: not found: {missing}"
        outside = {n: p for n, p in libs.items()
                   if not os.path.realpath(p).startswith(libs_dir + os.sep) and n not in ALLOWED}
        assert not outside, f"{binary} loads from outside the wheel: {outside}"
        assert any(os.path.realpath(p).startswith(libs_dir) for p in libs.values())
        assert not [n for n in libs if DLOPENED.search(n)], (binary, sorted(libs))


def test_the_module_exports_only_its_init(installed):
    """Nothing of the module's C++ (its static libraries, the std:: code libstdc++'s headers
    emit with default visibility) is exported: where libstdc++.so.6 is first loaded as the
    module's dependency, libstdc++'s own calls would bind to the module's copies, built from
    an older GCC's headers than the runtime's on a newer distribution (the H200 runs' crash:
    free(): invalid pointer in std::locale::~locale during `import torch` after `import
    saturate`, Ubuntu 24.04; docs/gpu.md)."""
    package, _ = installed
    (core,) = [os.path.join(package, n) for n in os.listdir(package)
               if n.startswith("_core.") and n.endswith(".so")]
    out = subprocess.run(["nm", "-D", "--defined-only", core], capture_output=True, text=True,
                         check=True).stdout
    exported = [line.split()[-1] for line in out.splitlines()]
    assert exported == ["PyInit__core"], exported[:20]


def test_a_new_venv_gets_all_it_needs_from_the_wheel_and_its_dependencies(wheel, photos, tmp_path):
    """A new venv without system site packages, `pip install WHEEL` (numpy comes from PyPI),
    and nothing else: the command packs JPEGs and the module decodes them (the bundled
    libjpeg-turbo), without torch."""
    venv = tmp_path / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(venv)],
                   check=True, timeout=120)
    python, exe = str(venv / "bin" / "python"), str(venv / "bin" / "saturate")
    done = subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                           wheel], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    folder = os.path.join(os.path.dirname(photos), "folder")  # conftest's 36 JPEGs
    out = str(tmp_path / "photos.sat")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SATURATE_CLI")}
    done = subprocess.run([exe, "pack", "folder", folder, out], capture_output=True, text=True,
                          timeout=120, env=env, cwd=str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    code = ("import sys, saturate\n"
            "assert 'torch' not in sys.modules\n"
            "loader = saturate.Loader(sys.argv[1], 6, framework='numpy', threads=1,\n"
            "    transforms={'image': [saturate.transforms.RandomResizedCrop(32)]})\n"
            "shapes = {b['image'].shape for b in loader}\n"
            "print(saturate.__file__, sorted(shapes))\n")
    done = subprocess.run([python, "-c", code, out], capture_output=True, text=True,
                          timeout=120, env=env, cwd=str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(str(venv)) and "(6, 3, 32, 32)" in done.stdout, done.stdout


def test_console_script_and_module_run(installed, photos):
    exe = os.path.join(os.path.dirname(sys.executable), "saturate")
    assert os.access(exe, os.X_OK), f"pip installed no saturate command beside {sys.executable}"
    for cmd in ([exe, "--help"], [sys.executable, "-m", "saturate", "--help"]):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "Usage:" in done.stdout and "pack" in done.stdout
    # The tool's own code paths through the bundled libraries: verify reads every record.
    done = subprocess.run([exe, "verify", photos], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
