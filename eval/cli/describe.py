"""`reconscore describe`: best-of-N captioning with a multimodal LLM (RemoteDescriber, the ReconScore paper)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from describer.presets import DESCRIBER_PRESETS, DescriberPreset
from eval.cli import options as opt
from recon_score.presets import PRESETS, ReconPreset
from recon_score.run_outputs import CAPTIONS, output_file


@click.command(
    "describe",
    epilog="""\b
Examples:
  reconscore describe --preset smoke --n 3 --out runs/describe-smoke            # bundled sample, offline
  reconscore describe --preset paper --images /data/ucm/test --out runs/rd      # Qwen3-VL-8B + Z-Image + DreamSim
  reconscore describe --preset paper --backend openai --base-url http://localhost:8000/v1 \\
      --captioner Qwen/Qwen3-VL-8B-Instruct --inputs list.txt --images /data/ucm --out runs/rd-server
\b
--inputs: a folder (searched recursively), one image, a .txt list of paths, or a .jsonl with `image`, optional
`id` and `references` (paths relative to --images, default the list's folder); --images DIR alone describes
every image under DIR. Output in --out:
candidates.jsonl (image, candidate index, caption, error, selection_score, recon_score if evaluated, selected), captions.jsonl
(image, the selected caption, its index, selection_score = the in-sample score that selected it, recon_score =
its held-out ReconScore from an independent render with --eval-seed), run.json. Rerun the same command to resume.
Exit status: 0 every image got a caption, 3 some images had no valid candidate, 1 the run could not start.""",
)
@click.option(
    "--inputs",
    type=click.Path(path_type=Path),
    default=None,
    help="What to caption: a folder (recursive), one image, a .txt list or a .jsonl (default: every image under "
    "--images, else the bundled UC Merced sample).",
)
@opt.images_root("the list's folder")
@opt.dataset_split("Describe the images of a dataset split; its references are kept")
@opt.preset(DESCRIBER_PRESETS, "Describer preset. ")
@opt.preset_flags(DescriberPreset, DESCRIBER_PRESETS["paper"])
@click.option(
    "--sampling-extensions/--no-sampling-extensions",
    default=True,
    show_default=True,
    help="openai backend: send top_k/repetition_penalty/min_p (vLLM, SGLang); off for strict OpenAI endpoints "
    "(then top_k must be 0 and repetition_penalty 1).",
)
@click.option("--base-url", default=None, help="openai backend: endpoint, e.g. http://localhost:8000/v1.")
@click.option(
    "--api-key-env",
    default="OPENAI_API_KEY",
    show_default=True,
    help="openai backend: environment variable holding the API key.",
)
@opt.positive_int("--concurrency", default=8, help="openai backend: requests in flight.")
@opt.device()
@opt.positive_int("--vlm-batch-size", default=1, help="Images per VLM generate call (each with N samples).")
@opt.positive_int("--t2i-batch-size", default=1, help="Candidates rendered per T2I call.")
@opt.positive_int(
    "--phase-size", default=32, help="Images captioned before the VLM is freed and the T2I model scores them."
)
@opt.preset_flags(ReconPreset, PRESETS["paper"], only=("t2i_model", "encoder"), what="Selection renders: ")
@opt.explain(
    "Explain each chosen caption on held-out renders (captions.jsonl's `explain`)",
    "held out: the evaluation seed, then derived ones, never a selection seed",
)
@opt.bands()
@opt.weights_dir()
@opt.cache("reconstruction/embedding")
@opt.trust_remote_code("the VLM and the T2I model (a preset's custom pipeline, e.g. text2earth's)")
@opt.positive_int("--limit", default=None, help="Only the first N images.")
@opt.retry_errors("images (no caption)")
@opt.overwrite()
@click.option("--out", type=opt.RUN_FOLDER, required=True, help="Run folder.")
def command(
    inputs,
    images_root,
    preset,
    device,
    vlm_batch_size,
    t2i_batch_size,
    weights_dir,
    cache_dir,
    no_cache,
    **kw,
) -> int:
    """Sample N captions per image with a multimodal LLM and keep the best (RemoteDescriber)."""
    from describer.backends import build_captioner
    from describer.run import DescribeJob, run_describe
    from eval.selection import build_selector, preflight, resolve_models
    from recon_score.runtime import resolve_device

    p = DESCRIBER_PRESETS[preset].override(**opt.pop_overrides(DescriberPreset, kw))
    explained = _explain_options(opt.pop_explain(kw), p.select_by)
    recon = opt.pop_overrides(ReconPreset, kw)  # t2i_model, encoder of the selection renders
    job_kw = {k: kw.pop(k) for k in ("limit", "overwrite", "retry_errors", "bands", "out", "phase_size")}
    dataset = {k: kw.pop(k) for k in ("dataset", "dataset_root", "split", "annotations")}
    items, source = _items(inputs, images_root, **dataset)
    device = resolve_device(device)
    cap = build_captioner(  # `kw` is left with the backend's options
        p.backend,
        p.captioner,
        device=device,
        dtype=p.dtype,
        revision=p.captioner_revision,
        batch_size=vlm_batch_size,
        **kw,
        image_input=p.vlm_image_input,
        collapse_whitespace=p.collapse_whitespace,
    )
    selector = build_selector(
        p.select_by,
        seeds={k: getattr(p, k) for k in ("selection_seed", "selection_seeds", "eval_seed")},
        recon_preset=p.recon_preset,
        device=device,
        batch_size=t2i_batch_size,
        cache_dir=cache_dir,
        use_cache=not no_cache,
        weights_dir=weights_dir,
        overrides=recon,
        trust_remote_code=kw.get("trust_remote_code", False),
    )
    preflight(cap, selector)
    job = DescribeJob(
        preset=p,
        captioner=cap,
        selector=selector,
        inputs=inputs if inputs is not None else images_root,
        images_root=images_root,
        vlm_batch_size=vlm_batch_size,
        argv=["reconscore", *sys.argv[1:]],
        items=items,
        source=source,
        explain=explained,
        resolve_models=lambda: resolve_models(cap, selector),
        **job_kw,
    )
    summary = run_describe(job)
    from accelerate import PartialState

    if PartialState().is_main_process:
        _print_summary(summary, job.out, p)
        opt.smoke_banner(summary.record)
    return summary.exit_code


def _explain_options(explain, select_by: str):
    """--explain's options (None without it): the explanation comes from ReconScore's renders, so it needs
    ReconScore selection; refused before any model loads."""
    from eval.metrics import get_metric_info

    if explain is not None and get_metric_info(select_by).name != "recon_score":
        raise click.UsageError(
            f"--explain needs ReconScore selection (--select-by recon_score), not {select_by!r}"
        )
    return explain


def _items(inputs, images_root, dataset, dataset_root, split, annotations) -> tuple[list | None, dict | None]:
    """What to describe, read and checked before any model is built (None, None: the bundled sample)."""
    if dataset:
        if inputs is not None or images_root is not None:
            raise click.UsageError("give either --inputs/--images or --dataset, not both")
        opt.dataset_root(dataset, dataset_root)
        from eval.datasets.adapters import split_inputs

        return split_inputs("describe", dataset, dataset_root, split, annotations)
    if inputs is not None or images_root is not None:
        from describer.inputs import discover_images

        return discover_images(inputs if inputs is not None else images_root, root=images_root), None
    return None, None


def _print_summary(summary, out: Path, preset) -> None:
    console, table = opt.summary_table("RemoteDescriber", out, already_complete=summary.already_complete)
    table.add_row("images", str(summary.images))
    table.add_row("described", str(summary.described))
    table.add_row("no valid candidate", str(summary.failed))
    table.add_row("candidates (valid)", f"{summary.candidates} ({summary.valid_candidates})")
    if summary.mean_selected is not None:
        what = "the render that chose" if summary.mean_held_out is not None else preset.select_by
        table.add_row(f"mean selection_score ({what})", f"{summary.mean_selected:.2f}")
    if summary.mean_held_out is not None:
        table.add_row(
            f"mean recon_score (held-out render, seed {preset.eval_seed})", f"{summary.mean_held_out:.2f}"
        )
    table.add_row("results", str(output_file(out, CAPTIONS)))
    console.print(table)
    opt.print_failures(console, summary.failures, where=CAPTIONS)
