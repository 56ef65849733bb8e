"""Which architectures compile, and how well: torchvision's families and backbones (scripts/zoo.py), timm's
families (one architecture per family, random weights, small inputs) and Hugging Face transformers'
architectures (scripts/zoo_transformers.py: text models with token ids and an attention mask, vision and
audio encoders), each exported, compiled and compared with onnxruntime (`diff`). Writes a table: compiled or
refused (with the op), % of MACs on Gemmini, CPU steps, diff verdict.

    python scripts/zoo_coverage.py [--only NAME,...] [--timm | --transformers] [--jobs N] [--markdown F [--update]]
                                   [--json F]

Nothing is downloaded: weights are random, inputs synthetic. Each model runs in its own process (a crash
or a 10-minute timeout is a row, not the end of the sweep).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import zoo  # noqa: E402
import zoo_transformers  # noqa: E402

SMALL = ("pico", "femto", "atto", "nano", "xxs", "xx_small", "tiny", "xs", "small", "_050", "_075", "b0", "s0",
         "m0", "t8", "18", "26")  # name fragments of a family's small members, most preferred first


def timm_families() -> list[str]:
    """One architecture per timm model module (its family): the first name with the most preferred
    small-member fragment."""
    zoo.torchvision_models()  # timm imports torchvision
    import timm
    chosen = []
    for module in timm.list_modules():
        names = sorted(timm.list_models(module=module))
        if names:
            rank = [next((i for i, f in enumerate(SMALL) if f in n), len(SMALL)) for n in names]
            chosen.append(names[rank.index(min(rank))])
    return chosen


SMALL_SIDE = 96  # timm models are exported at most this wide, unless their input size is fixed or this fails


def timm_input(name: str) -> tuple[tuple[int, ...], bool]:
    """The model's own input shape (batch 1) and whether timm says it is fixed."""
    zoo.torchvision_models()  # timm imports torchvision
    import timm
    cfg = timm.create_model(name, pretrained=False, num_classes=10).pretrained_cfg
    size = cfg.get("input_size", (3, 224, 224))
    return (1, 3) + tuple(size[1:]), bool(cfg.get("fixed_input_size", False))


def timm_arch(name: str) -> zoo.Arch:
    def build():
        zoo.torchvision_models()  # timm imports torchvision
        import timm
        return timm.create_model(name, pretrained=False, num_classes=10)

    def shape():
        native, fixed = timm_input(name)
        return native if fixed else native[:2] + (min(native[2], SMALL_SIDE), min(native[3], SMALL_SIDE))
    zoo.torchvision_models()  # before timm, which imports torchvision
    import timm
    family = next((m for m in timm.list_modules() if name in timm.list_models(module=m)), name)
    return zoo.Arch(name, family, build, shape)


def find(name: str, from_timm: bool) -> zoo.Arch:
    """An architecture by name (builders are closures: a child process looks them up again)."""
    if from_timm:
        return timm_arch(name)
    return next(a for a in zoo.torchvision_families() if a.name == name)


def run_one(name: str, source: str, out: dict, samples: tuple[int, int] | None = None) -> None:
    """Export, compile, diff; fills `out` (a Manager dict) as it goes. `source`: torchvision, timm or
    transformers; `samples`: (calibration, diff) samples instead of the source's defaults."""
    if samples is not None:
        out.update(samples=list(samples))
    if source == "transformers":
        return run_transformers(name, out, samples or (8, 4))
    calib_n, diff_n = samples or (8, 2)
    from_timm = source == "timm"
    arch = find(name, from_timm)
    if callable(arch.shape):
        arch = zoo.Arch(arch.name, arch.family, arch.build, arch.shape())
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        try:
            path = zoo.export(arch, Path(tmp) / "m.onnx")
        except Exception as exc:  # noqa: BLE001 - a row of the table
            native = timm_input(name)[0] if from_timm else arch.shape
            if native == arch.shape:
                out.update(status="export failed", detail=str(exc).splitlines()[0][:160])
                return
            arch = zoo.Arch(arch.name, arch.family, arch.build, native)  # the small size may not suit it
            try:
                path = zoo.export(arch, Path(tmp) / "m.onnx")
            except Exception as exc:  # noqa: BLE001
                out.update(status="export failed", detail=str(exc).splitlines()[0][:160])
                return
        out.update(input="x".join(map(str, arch.shape[2:])))
        compile_and_diff(path, {"x": zoo.calibration(arch, calib_n, 0)}, {"x": zoo.calibration(arch, diff_n, 1)},
                         out, start)


def run_transformers(name: str, out: dict, samples: tuple[int, int]) -> None:
    model = zoo_transformers.find(name)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        try:
            path = zoo_transformers.export(model, Path(tmp) / "m.onnx")
        except Exception as exc:  # noqa: BLE001 - a row of the table
            out.update(status="export failed", detail=str(exc).splitlines()[0][:160])
            return
        calib = zoo_transformers.inputs(model, samples[0], 0)
        out.update(input=", ".join(f"{k} {'x'.join(map(str, v.shape[2:]))}" for k, v in calib.items()))
        compile_and_diff(path, calib, zoo_transformers.inputs(model, samples[1], 1), out, start)


def compile_and_diff(path: Path, calib: dict, data: dict, out: dict, start: float) -> None:
    """Compile with `calib` (samples by input name), diff on `data`; the row's figures into `out`."""
    import onnx2gemmini as o2g
    from onnx2gemmini.compare import run_diff
    from onnx2gemmini.data import Dataset
    from onnx2gemmini.emit.report import build_report

    try:
        compiled = o2g.compile(path, calib=Dataset(calib, None, "synthetic"))
    except o2g.O2GError as exc:
        out.update(status="refused", detail=str(exc).splitlines()[0][:300])
        return
    report = build_report(compiled, compiled.timing)
    totals = report["totals"]
    cpu_steps = sum(1 for layer in report["layers"] if layer["target"] == "cpu")
    out.update(status="compiled", macs=totals["macs"], gemmini_share=totals["macs_on_gemmini"] / max(totals["macs"], 1),
               cpu_steps=cpu_steps, steps=len(report["layers"]))
    result = run_diff(compiled, Dataset(data, None, "synthetic"))
    verdict = result["verdict"]
    out.update(diff="PASSED" if verdict["passed"] else "FAILED: " + "; ".join(verdict["failures"][:2])[:300],
               sqnr=min((o["fp32_vs_int8"]["sqnr_db"] or 99) for o in result["outputs"].values()),
               seconds=round(time.perf_counter() - start, 1))


def sweep(archs: list, timeout: float, source: str, jobs: int = 1,
          samples: tuple[int, int] | None = None) -> list[dict]:
    """Each architecture in its own spawned process, `jobs` at a time; rows in the architectures' order."""
    rows: list[dict | None] = [None] * len(archs)
    with multiprocessing.Manager() as manager:
        running: list[tuple[int, object, float, object]] = []
        queue = list(enumerate(archs))
        while queue or running:
            while queue and len(running) < jobs:
                i, arch = queue.pop(0)
                out = manager.dict(status="crashed")
                process = multiprocessing.get_context("spawn").Process(target=run_one,
                                                                       args=(arch.name, source, out, samples))
                process.start()
                running.append((i, process, time.monotonic(), out))
            time.sleep(0.5)
            for entry in list(running):
                i, process, started, out = entry
                if process.is_alive() and time.monotonic() - started < timeout:
                    continue
                if process.is_alive():
                    process.kill()
                    out["status"] = out.get("status", "") + f" (timed out after {timeout:.0f} s)"
                process.join()
                running.remove(entry)
                rows[i] = {"name": archs[i].name, "family": archs[i].family, **dict(out)}
                print(json.dumps(rows[i]), flush=True)
    return rows


def markdown(rows: list[dict]) -> str:
    """The table; every cell (names and error texts come from the models) through emit.names.markdown."""
    from onnx2gemmini.emit.names import markdown as markdown_cell

    lines = ["| model | family | input | result | MACs on Gemmini | CPU steps / steps | diff | SQNR dB |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        share = f"{r['gemmini_share']:.1%}" if "gemmini_share" in r else ""
        steps = f"{r['cpu_steps']} / {r['steps']}" if "steps" in r else ""
        result = r["status"] if r["status"] == "compiled" else f"{r['status']}: {r.get('detail', '')}"
        if "samples" in r:
            result += f" ({r['samples'][0]} calibration samples, {r['samples'][1]} compared)"
        sqnr = f"{r['sqnr']:.1f}" if "sqnr" in r else ""
        cells = [r["name"], r["family"], r.get("input", ""), result, share, steps, r.get("diff", ""), sqnr]
        lines.append("| " + " | ".join(markdown_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--timm", action="store_true", help="timm's families instead of torchvision's")
    parser.add_argument("--transformers", action="store_true", help="Hugging Face transformers' architectures")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--jobs", type=int, default=1, help="architectures compiled side by side")
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--update", action="store_true",
                        help="with --markdown: replace only the measured models' rows of the page's table")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--samples", help="CALIB,DIFF: calibration and diff samples instead of the defaults "
                        "(8 and 2; 8 and 4 for transformers), said in the rows")
    args = parser.parse_args()
    samples = tuple(int(n) for n in args.samples.split(",")) if args.samples else None
    if samples is not None and (len(samples) != 2 or min(samples) < 1):
        parser.error("--samples takes CALIB,DIFF: two positive counts")
    source = "timm" if args.timm else "transformers" if args.transformers else "torchvision"
    archs = [timm_arch(n) for n in timm_families()] if args.timm else zoo_transformers.MODELS \
        if args.transformers else zoo.torchvision_families()
    if args.only:
        keep = set(args.only.split(","))
        archs = [a for a in archs if a.name in keep]
    rows = sweep(archs, args.timeout, source, max(1, args.jobs), samples)
    compiled = sum(r["status"] == "compiled" for r in rows)
    passed = sum(r.get("diff") == "PASSED" for r in rows)
    print(f"\n{compiled} of {len(rows)} compile; {passed} pass diff")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    if args.markdown:
        table = markdown(rows)
        if args.update:
            table = updated_table(args.markdown.read_text(), source, table)
        write_table(args.markdown, source, table)


def updated_table(page: str, source: str, new: str) -> str:
    """The page's table for `source` with the rows of `new` (same columns) in place of the rows of the same
    model; a model the table lacks is added at its end."""
    start, end = f"<!-- zoo-table: {source} -->\n", f"<!-- end of zoo-table: {source} -->"
    if start not in page or end not in page:
        return new
    old_lines = page.split(start, 1)[1].split(end, 1)[0].splitlines()
    fresh = {line.split(" | ", 1)[0]: line for line in new.splitlines()[2:]}
    lines = [fresh.pop(line.split(" | ", 1)[0], line) for line in old_lines]
    return "\n".join(lines + list(fresh.values())) + "\n"


def write_table(path: Path, source: str, table: str) -> None:
    """The table between `<!-- zoo-table: SOURCE -->` and `<!-- end of zoo-table: SOURCE -->` in `path` (the
    rest of the page is prose, kept as it is); a page without them gets them, with the table, at its end."""
    start, end = f"<!-- zoo-table: {source} -->\n", f"<!-- end of zoo-table: {source} -->"
    text = path.read_text() if path.exists() else ""
    if start in text and end in text:
        head, rest = text.split(start, 1)
        path.write_text(head + start + table + end + rest.split(end, 1)[1])
    else:
        path.write_text(text + ("\n" if text else "") + start + table + end + "\n")


if __name__ == "__main__":
    main()
