"""`reconscore describe`: best-of-N captioning with a multimodal LLM (RemoteDescriber, seed 004)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from eval.cli import options as opt


@click.command(
    "describe",
    cls=opt.renamed({"--dataset-root": "--root"}),
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
@opt.images_root("the list's folder", file_okay=True)
@click.option(
    "--dataset",
    default=None,
    help="Describe the images of a dataset split (rsicd, ucm-captions, sydney-captions, nwpu-captions, rsitmd, "
    "...; needs --root); its references are kept.",
)
@click.option(
    "--root",
    "dataset_root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Dataset folder (annotations + images/).",
)
@click.option("--split", default="test", show_default=True, help="Dataset split ('all' for every split).")
@click.option(
    "--annotations",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Dataset annotation file, if not at its default place under --root.",
)
@click.option(
    "--preset", default="paper", show_default=True, help="paper | fast | smoke (`reconscore presets list`)."
)
@click.option(
    "--n", type=click.IntRange(min=1), default=None, help="Candidates per image (preset: 10; smoke: 3)."
)
@click.option(
    "--select-by",
    default=None,
    help="Selection metric, a `reconscore metrics list` name (default: recon_score). Reference-based metrics "
    "use the `references` of a .jsonl list.",
)
@click.option(
    "--backend",
    type=click.Choice(["transformers", "vllm", "openai"]),
    default=None,
    help="Captioner backend (default: the preset's, transformers).",
)
@click.option(
    "--captioner", default=None, help="VLM hub id or local folder (openai backend: the served model name)."
)
@click.option("--captioner-revision", default=None, help="Hub revision of the VLM.")
@click.option(
    "--prompt",
    default=None,
    help="'paper' (the authors' guideline prompt), 'brief', a text file, or the prompt text.",
)
@click.option("--temperature", type=float, default=None, help="Sampling temperature (paper: 0.8).")
@click.option("--top-p", type=float, default=None, help="Nucleus sampling (paper: 0.9).")
@click.option("--max-new-tokens", type=click.IntRange(min=1), default=None, help="Paper: 512.")
@click.option(
    "--top-k",
    type=click.IntRange(min=0),
    default=None,
    help="Top-k filter, 0 = off (paper: 20, what the authors' transformers call inherited from the checkpoint).",
)
@click.option(
    "--repetition-penalty", type=click.FloatRange(min=0, min_open=True), default=None, help="1 = off (paper)."
)
@click.option(
    "--sampling-extensions/--no-sampling-extensions",
    default=True,
    show_default=True,
    help="openai backend: send top_k/repetition_penalty/min_p (vLLM, SGLang); off for strict OpenAI endpoints "
    "(then top_k must be 0 and repetition_penalty 1).",
)
@click.option(
    "--selection-seed",
    type=int,
    default=None,
    help="T2I seed of the selection renders (preset: 0; must differ from --eval-seed).",
)
@click.option(
    "--selection-seeds",
    type=click.IntRange(min=1),
    default=None,
    help="K: a candidate's selection score is its mean over K seeds (K x the renders; preset: 1).",
)
@click.option(
    "--eval-seed",
    type=int,
    default=None,
    help="T2I seed of the held-out render that scores the chosen caption (preset: 42, the authors').",
)
@click.option(
    "--eval-candidates",
    type=click.Choice(["selected", "all"]),
    default=None,
    help="Held-out render for the chosen caption only (preset), or for every candidate (`study n-sweep`).",
)
@click.option(
    "--seed", type=int, default=None, help="Sampling seed (per image: derived from it and the pixels)."
)
@click.option("--base-url", default=None, help="openai backend: endpoint, e.g. http://localhost:8000/v1.")
@click.option(
    "--api-key-env",
    default="OPENAI_API_KEY",
    show_default=True,
    help="openai backend: environment variable holding the API key.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="openai backend: requests in flight.",
)
@opt.device()
@click.option(
    "--vlm-batch-size",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Images per VLM generate call (each with N samples).",
)
@click.option(
    "--t2i-batch-size",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Candidates rendered per T2I call.",
)
@click.option(
    "--phase-size",
    type=click.IntRange(min=1),
    default=32,
    show_default=True,
    help="Images captioned before the VLM is freed and the T2I model scores them.",
)
@click.option(
    "--t2i-model", default=None, help="Override the selection preset's T2I model (hub id or folder)."
)
@click.option("--encoder", default=None, help="Override the selection preset's similarity encoder spec.")
@click.option(
    "--recon-preset",
    default=None,
    help="ReconScore preset used for selection (default: the describer preset's).",
)
@opt.bands()
@opt.weights_dir()
@opt.cache("reconstruction/embedding")
@click.option("--trust-remote-code", is_flag=True, help="Allow the VLM's custom code (off by default).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N images.")
@opt.retry_errors("images (no caption)")
@opt.overwrite()
@click.option("--out", type=opt.RUN_FOLDER, required=True, help="Run folder.")
def command(
    inputs,
    images_root,
    dataset,
    dataset_root,
    split,
    annotations,
    preset,
    n,
    select_by,
    backend,
    captioner,
    captioner_revision,
    prompt,
    temperature,
    top_p,
    max_new_tokens,
    top_k,
    repetition_penalty,
    sampling_extensions,
    selection_seed,
    selection_seeds,
    eval_seed,
    eval_candidates,
    seed,
    base_url,
    api_key_env,
    concurrency,
    device,
    vlm_batch_size,
    t2i_batch_size,
    phase_size,
    t2i_model,
    encoder,
    recon_preset,
    bands,
    weights_dir,
    cache_dir,
    no_cache,
    trust_remote_code,
    limit,
    retry_errors,
    overwrite,
    out,
) -> int:
    """Sample N captions per image with a multimodal LLM and keep the best (RemoteDescriber)."""
    from describer.backends import build_captioner
    from describer.presets import get_describer_preset
    from describer.prompts import load_prompt
    from describer.run import DescribeJob, run_describe
    from eval.metrics import get_metric_info
    from recon_score.runtime import resolve_device

    p = get_describer_preset(preset).replace(
        n=n,
        backend=backend,
        captioner=captioner,
        captioner_revision=captioner_revision,
        prompt=load_prompt(prompt) if prompt else None,
        temperature=temperature,
        top_p=top_p,
        max_new_tokens=max_new_tokens,
        top_k=top_k,
        repetition_penalty=repetition_penalty,
        selection_seed=selection_seed,
        selection_seeds=selection_seeds,
        eval_seed=eval_seed,
        eval_candidates=eval_candidates,
        seed=seed,
        recon_preset=recon_preset,
        select_by=get_metric_info(select_by).name if select_by else None,  # an old alias -> today's name
    )
    inputs, images_root, dataset_root = _old_spellings(inputs, images_root, dataset_root, dataset)
    items = source = None
    if dataset:
        if inputs is not None or images_root is not None:
            raise click.UsageError("give either --inputs/--images or --dataset, not both")
        if dataset_root is None:
            raise click.UsageError("--dataset needs --root")
        from eval.datasets import load_dataset
        from eval.datasets.adapters import describe_items

        ds = load_dataset(dataset, dataset_root, split, annotations=annotations)
        items, source = describe_items(ds), ds.summary()
    elif (
        inputs is not None or images_root is not None
    ):  # read and validate the inputs before any model is built
        from describer.inputs import discover_images

        items = discover_images(inputs if inputs is not None else images_root, root=images_root)
    device = resolve_device(device)
    cap = build_captioner(
        p.backend,
        p.captioner,
        device=device,
        dtype=p.dtype,
        revision=p.captioner_revision,
        batch_size=vlm_batch_size,
        trust_remote_code=trust_remote_code,
        base_url=base_url,
        api_key_env=api_key_env,
        concurrency=concurrency,
        sampling_extensions=sampling_extensions,
    )
    selector = build_selector(
        p.select_by,
        seeds={
            "selection_seed": p.selection_seed,
            "selection_seeds": p.selection_seeds,
            "eval_seed": p.eval_seed,
        },
        recon_preset=p.recon_preset,
        device=device,
        batch_size=t2i_batch_size,
        cache_dir=cache_dir,
        use_cache=not no_cache,
        weights_dir=weights_dir,
        overrides={"t2i_model": t2i_model, "encoder": encoder},
    )
    _preflight(cap, selector)
    job = DescribeJob(
        out=out,
        preset=p,
        captioner=cap,
        selector=selector,
        inputs=inputs if inputs is not None else images_root,
        images_root=images_root,
        vlm_batch_size=vlm_batch_size,
        phase_size=phase_size,
        limit=limit,
        overwrite=overwrite,
        retry_errors=retry_errors,
        argv=["reconscore", *sys.argv[1:]],
        items=items,
        source=source,
        bands=bands,
    )
    summary = run_describe(job)
    from accelerate import PartialState

    if PartialState().is_main_process:
        _print_summary(summary, out, p)
    return summary.exit_code


def build_selector(
    name: str,
    *,
    recon_preset: str,
    device: str,
    batch_size: int,
    cache_dir,
    use_cache: bool,
    weights_dir,
    overrides: dict | None = None,
    seeds: dict | None = None,
):
    """The selection metric: ReconScore (the paper's), or any metric of the eval metric registry.

    `seeds`: ReconScoreSelector's selection_seed / selection_seeds / eval_seed."""
    from eval.metrics import get_metric_info

    name = get_metric_info(name).name  # an old alias (reconscore) warns once and means today's name
    if name == "recon_score":
        from describer.selection import ReconScoreSelector
        from recon_score.artifact_cache import ArtifactCache
        from recon_score.scorer import ReconScorer

        scorer = ReconScorer.from_preset(
            recon_preset,
            overrides=overrides,
            device=device,
            batch_size=batch_size,
            cache=ArtifactCache(cache_dir, enabled=use_cache),
            weights_dir=weights_dir,
        )
        return ReconScoreSelector(scorer, **(seeds or {}))
    from eval.selection import metric_selector

    return metric_selector(name, device=device)


def _preflight(captioner, selector) -> None:
    """Resolve every model before any work, and report all that are missing at once."""
    from recon_score.errors import ModelNotAvailableError, ReconScoreError

    captioner.preflight()  # a server that cannot answer fails now, in seconds
    missing = []
    checks = [("captioner", captioner.identity)]
    scorer = getattr(selector, "scorer", None)
    if scorer is not None:
        checks += [("T2I model", lambda: scorer.renderer.resolved), ("encoder", lambda: scorer.encoder)]
    for what, check in checks:
        try:
            check()
        except ModelNotAvailableError as err:
            missing.append(f"- {what}: {err}")
    if missing:
        raise ReconScoreError("models not available for `reconscore describe`:\n" + "\n".join(missing))


def _print_summary(summary, out: Path, preset) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    if summary.already_complete:
        console.print(f"[bold]{escape(str(out))}[/] is already complete: nothing to do.")
    table = Table(title="RemoteDescriber", show_header=False)
    table.add_row("images", str(summary.images))
    table.add_row("described", str(summary.described))
    table.add_row("no valid candidate", str(summary.failed))
    table.add_row("candidates (valid)", f"{summary.candidates} ({summary.valid_candidates})")
    if summary.mean_selected is not None:
        held_out = summary.mean_held_out is not None
        label = "in-sample (selection render)" if held_out else "of selected"
        table.add_row(f"mean {preset.select_by} {label}", f"{summary.mean_selected:.2f}")
    if summary.mean_held_out is not None:
        table.add_row(f"mean ReconScore held-out (seed {preset.eval_seed})", f"{summary.mean_held_out:.2f}")
    table.add_row("results", str(out / "captions.jsonl"))
    console.print(table)
    for image_id, error in summary.failures[:10]:
        console.print(f"[red]failed[/] {escape(str(image_id))}: {escape(str(error))}", highlight=False)
    if preset.meaningless:
        console.print(
            "[yellow]smoke preset: tiny random models, these captions and numbers are meaningless.[/]"
        )


def _old_spellings(inputs, images_root, dataset_root, dataset):
    """Until the vocabulary was unified, `--images` was the input list and `--root` the folder list entries are
    relative to. Those calls keep working: a file given to --images is the input list, --root without --dataset
    is the image folder. Each says so once."""
    if images_root is not None and inputs is None and images_root.is_file():
        click.echo("warning: describe --images FILE: the input list is now --inputs FILE", err=True)
        inputs, images_root = images_root, None
    if dataset_root is not None and dataset is None:
        click.echo(
            "warning: describe --root without --dataset: treated as --images (the image folder)", err=True
        )
        if images_root is None:
            images_root = dataset_root
        dataset_root = None
    return inputs, images_root, dataset_root
