"""Regenerate the Python code and descriptor sets for every .proto in protos/ (and tests/flows/).

Each `<name>.proto` gets `<name>_pb2.py` (+ `.pyi`, and `_pb2_grpc.py` for services) and
`<name>.binpb`: a FileDescriptorSet of the file and its imports, which the engine's JVM decoder
reads (streaming/records/decode.py). The sets keep the .proto's comments (source_code_info): the
tables' column docs come from them (streaming/flow/descriptor_set.py), generated code has none.

Run `python scripts/gen_protos.py` after editing a .proto; `--check` exits 1 when the committed
generated files differ from what the pinned grpcio-tools produces (CI runs it).
Imports between protos are written relative to the import root, e.g.
`import "tidelake/protos/call.proto";`, so generated modules import `tidelake.protos.call_pb2`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
# (source folder, import package it maps to)
PROTO_PACKAGES = [(ROOT / "protos", "tidelake/protos"), (ROOT / "tests" / "flows", "flows")]


def generate(out_dir: Path) -> list[Path]:
    """Compile all protos into out_dir, mirroring the repo folders; return the written files."""
    with tempfile.TemporaryDirectory() as tmp:
        include = Path(tmp) / "include"
        for folder, package in PROTO_PACKAGES:
            (include / package).parent.mkdir(parents=True, exist_ok=True)
            (include / package).symlink_to(folder)
        gen = Path(tmp) / "gen"
        gen.mkdir()
        written: list[Path] = []
        for folder, package in PROTO_PACKAGES:
            protos = sorted(folder.glob("*.proto"))
            paths = [f"{include / package / p.name}" for p in protos]
            imports = [f"-I{include}", f"-I{Path(protoc.__file__).parent / '_proto'}"]
            code = [f"--python_out={gen}", f"--pyi_out={gen}", f"--grpc_python_out={gen}"]
            if protoc.main(["protoc", *imports, *code, *paths]) != 0:
                raise SystemExit(f"protoc failed for {folder}")
            for proto, path in zip(protos, paths, strict=True):
                descriptor_set = f"--descriptor_set_out={gen / package / proto.stem}.binpb"
                options = ["--include_imports", "--include_source_info"]
                if protoc.main(["protoc", *imports, descriptor_set, *options, path]):
                    raise SystemExit(f"protoc failed on the descriptor set of {proto}")
            for produced in sorted((gen / package).iterdir()):
                if produced.name.endswith("_pb2_grpc.py") and "class " not in produced.read_text():
                    continue  # messages-only protos get no (empty) grpc module
                target = out_dir / folder.relative_to(ROOT) / produced.name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(produced, target)
                written.append(target)
        return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if generated code is stale")
    args = parser.parse_args()
    if not args.check:
        for path in generate(ROOT):
            print(f"wrote {path.relative_to(ROOT)}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        stale = [
            path.relative_to(tmp)
            for path in generate(Path(tmp))
            if not (ROOT / path.relative_to(tmp)).exists()
            or (ROOT / path.relative_to(tmp)).read_bytes() != path.read_bytes()
        ]
    if stale:
        print("generated protobuf code is stale; run `make protos`:", *stale, sep="\n  ")
        return 1
    print("generated protobuf code is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
