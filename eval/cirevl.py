"""CIReVL's two models, built from the project's backends: the captioner (describer backends, greedy, one caption
per reference image) and the LLM rewriter (a transformers causal LM, greedy). `reconscore retrieve` hands them to
the method as `Resources.captioner` / `rewriter` (retrieval.methods.cirevl)."""

from __future__ import annotations


def build_captioner(spec: str, *, device: str | None, prompt: str):
    """CIReVL's captioner from the describer's backends: BACKEND:MODEL, greedy, one caption per image."""
    from describer.backends import CaptionRequest, Sampling
    from describer.backends import build_captioner as build
    from recon_score.errors import ReconScoreError
    from recon_score.runtime import resolve_device

    backend, sep, model = spec.partition(":")
    if not sep or not model:
        raise ReconScoreError(
            f"--captioner: expected BACKEND:MODEL (e.g. transformers:Salesforce/blip2-opt-2.7b), got {spec!r}"
        )
    # one-line captions for the rewriter's prompt, from the image as read
    captioner = build(backend, model, device=resolve_device(device), collapse_whitespace=True)
    sampling = Sampling(n=1, temperature=0.0, top_p=1.0, max_new_tokens=77)

    def caption(images: list) -> list[str]:
        requests = [CaptionRequest(image=im, seed=0, key=str(i)) for i, im in enumerate(images)]
        out = []
        for i, candidates in enumerate(captioner.generate(requests, prompt, sampling)):
            if candidates[0].text is None:
                raise ReconScoreError(
                    f"captioner {spec}: no caption for reference image {i}: {candidates[0].error}"
                )
            out.append(candidates[0].text)
        return out

    return caption


def build_rewriter(name: str, *, device: str | None, template: str):
    """CIReVL's LLM rewriter: a transformers causal LM (hub id or local folder), greedy decoding."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from recon_score.hub import resolve_model
    from recon_score.runtime import resolve_device

    resolved = resolve_model(name, kind="text LLM", option="--rewriter")
    dev = resolve_device(device)
    tokenizer = AutoTokenizer.from_pretrained(str(resolved.path))
    model = AutoModelForCausalLM.from_pretrained(str(resolved.path)).to(dev).eval()

    @torch.inference_mode()
    def rewrite(captions: list[str], texts: list[str]) -> list[str]:
        out = []
        for caption, text in zip(captions, texts):
            prompt = template.format(caption=caption, text=text)
            if tokenizer.chat_template:
                ids = tokenizer.apply_chat_template(
                    [{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt"
                )
            else:
                ids = tokenizer(prompt, return_tensors="pt").input_ids
            gen = model.generate(ids.to(dev), do_sample=False, max_new_tokens=77)
            out.append(" ".join(tokenizer.decode(gen[0, ids.shape[1] :], skip_special_tokens=True).split()))
        return out

    return rewrite
