"""The transformers engine: a chat VLM (AutoModelForImageTextToText + AutoProcessor: Qwen3-VL, Qwen2.5-VL, LLaVA)
for captions (batched across images, N samples per image with `num_return_sequences`) and judge answers, or a
causal LM (`text_only`) for text completions."""

from __future__ import annotations

import logging
from dataclasses import replace

import torch

from describer.backends.base import (
    Candidate,
    CaptionRequest,
    JudgeAnswer,
    JudgeRequest,
    JudgeStep,
    LocalBackend,
    Sampling,
    completion,
    digit_token_ids,
    prompt_seed,
)
from describer.backends.sampling import generation_config, transformers_kwargs
from recon_score.errors import ModelNotAvailableError, ReconScoreError
from recon_score.runtime import loading_bars_off, parse_dtype, seeded
from recon_score.seeds import derive_seed

log = logging.getLogger(__name__)


class TransformersBackend(LocalBackend):
    name = "transformers"

    def __init__(
        self,
        model: str,
        *,
        device: str = "cpu",
        dtype: str = "bfloat16",
        revision: str | None = None,
        batch_size: int = 1,
        trust_remote_code: bool = False,
        text_only: bool = False,
    ):
        self.model_name, self.device, self.revision = model, device, revision
        self.dtype = "float32" if not str(device).startswith("cuda") else dtype
        self.batch_size = max(1, batch_size)
        self.trust_remote_code, self.text_only = trust_remote_code, text_only
        if text_only:
            self.resolved  # noqa: B018  (a missing model fails when the backend is built)

    def identity(self) -> dict:
        out = {"backend": self.name, **self.resolved.as_dict(), "dtype": self.dtype}
        if self.text_only:
            return out
        return {
            **out,
            "batch_size": self.batch_size,
            "device_type": torch.device(self.device).type,
            **self.text_and_pixels(),
        }

    def _load(self):
        path = str(self.resolved.path)
        try:
            with loading_bars_off("transformers"):
                processor, model = self._load_text(path) if self.text_only else self._load_vlm(path)
        except (OSError, ValueError) as err:
            what = (
                "a transformers causal LM folder"
                if self.text_only
                else "a folder holding a transformers VLM checkpoint (config.json, weights, processor files)"
            )
            raise ModelNotAvailableError(
                self.model_name,
                searched=[path],
                reason=str(err)[:300],
                fix=f"Point {self._model_kind()[1]} at {what}.",
            ) from err
        tok = getattr(processor, "tokenizer", processor)
        if tok is None:
            raise ReconScoreError(f"{self.model_name}: its processor has no tokenizer; not a chat VLM?")
        tok.padding_side = "left"  # decoder-only generation continues from the right end of every row
        if self.text_only and tok.pad_token is None:
            tok.pad_token = tok.eos_token
        self._processor, self._model = processor, model.to(self.device).eval()

    def _load_vlm(self, path: str):
        from transformers import AutoModelForImageTextToText, AutoProcessor

        processor = AutoProcessor.from_pretrained(path, trust_remote_code=self.trust_remote_code)
        if self.resolved.build is not None:  # a synthetic VLM made straight on the device (recon_score.hub)
            return processor, self.resolved.build(device=self.device, dtype=parse_dtype(self.dtype))
        model = AutoModelForImageTextToText.from_pretrained(
            path, dtype=parse_dtype(self.dtype), trust_remote_code=self.trust_remote_code
        )
        return processor, model

    def _load_text(self, path: str):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=self.trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=parse_dtype(self.dtype), trust_remote_code=self.trust_remote_code
        )
        return tok, model

    @property
    def _tokenizer(self):
        return getattr(self._processor, "tokenizer", self._processor)

    def sampling_request(self, sampling: Sampling) -> dict:
        return {"generation_config": transformers_kwargs(sampling), "seed": "per image (torch.manual_seed)"}

    @torch.inference_mode()
    def generate(
        self, requests: list[CaptionRequest], prompt: str, sampling: Sampling
    ) -> list[list[Candidate]]:
        self._ensure_loaded()
        out: list[list[Candidate]] = []
        for start in range(0, len(requests), self.batch_size):
            chunk = requests[start : start + self.batch_size]
            out.extend(self._generate_chunk(chunk, prompt, sampling))
        return out

    def _generate_chunk(
        self, chunk: list[CaptionRequest], prompt: str, sampling: Sampling
    ) -> list[list[Candidate]]:
        text = self._chat_text(prompt)
        try:
            images = self.vlm_images(chunk, prompt)
            inputs = self._processor(
                text=[text] * len(chunk), images=images, padding=True, return_tensors="pt"
            ).to(self.device)
            seed = (
                chunk[0].seed
                if len(chunk) == 1
                else derive_seed(sampling.seed, *(str(r.seed) for r in chunk))
            )
            # every sampling field explicit: nothing is inherited from the checkpoint's generation_config.json
            config = generation_config(sampling, self._model.generation_config)
            with seeded(seed, self.device):  # torch.manual_seed's draws; the caller's generators restored
                ids = self._model.generate(**inputs, generation_config=config)
        except (RuntimeError, ValueError) as err:  # OOM, a processor error on an odd image, ...
            log.warning("generation failed for %s: %s", [r.key for r in chunk], err)
            return [[Candidate(None, error=f"generation failed: {err}"[:500])] * sampling.n for _ in chunk]
        new = ids[:, inputs["input_ids"].shape[1] :]
        # as the authors' RemoteDescriber.py decodes: special tokens dropped, spaces left as the tokenizer made them
        texts = self._processor.batch_decode(
            new, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )
        eos = self._eos_ids()
        pad = self._model.generation_config.pad_token_id
        cands = []
        for row, text in zip(new.tolist(), texts):
            ended = any(t in eos for t in row) or (pad is not None and row and row[-1] == pad)
            cands.append(self.candidate(text, "stop" if ended else "length"))
        # rows are grouped per input: [img0 x N, img1 x N, ...]
        return [cands[i : i + sampling.n] for i in range(0, len(cands), sampling.n)]

    def _eos_ids(self) -> set:
        eos = self._model.generation_config.eos_token_id
        return set(eos) if isinstance(eos, list) else {eos}

    def complete(self, prompts: list[str], sampling: Sampling) -> list[Candidate]:
        self._ensure_loaded()
        tok = self._tokenizer
        out = []
        for prompt in prompts:  # one call per prompt: outputs independent of neighbours (seeded per prompt)
            if getattr(tok, "chat_template", None):
                text = tok.apply_chat_template(
                    [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
                )
            else:
                text = prompt
            enc = tok([text], return_tensors="pt").to(self.device)
            config = generation_config(replace(sampling, n=1), self._model.generation_config)
            with torch.inference_mode(), seeded(prompt_seed(sampling.seed, prompt), self.device):
                ids = self._model.generate(**enc, generation_config=config)
            new = ids[0, enc["input_ids"].shape[1] :]
            finish = "stop" if any(t in self._eos_ids() for t in new.tolist()) else "length"
            out.append(completion(tok.decode(new, skip_special_tokens=True), finish))
        return out

    def judge(self, req: JudgeRequest) -> JudgeAnswer:
        """Exact log-softmax over the vocabulary at every generated token (raw logits, before any processor)."""
        from transformers import GenerationConfig

        self._ensure_loaded()
        text = self._judge_text(req.prompt, req.conversation)
        tok = self._tokenizer
        ids = digit_token_ids(tok)
        by_id = {i: d for d, i in ids.items()}
        inputs = self._processor(text=[text], images=[req.image], return_tensors="pt").to(self.device)
        base = self._model.generation_config
        config = GenerationConfig(
            do_sample=False,
            num_beams=1,
            max_new_tokens=req.max_new_tokens,
            eos_token_id=base.eos_token_id,
            pad_token_id=base.pad_token_id if base.pad_token_id is not None else tok.pad_token_id,
            output_logits=True,  # raw logits: the model's own distribution, before any processor
            return_dict_in_generate=True,
        )
        allowed = (
            _digits_only(tok, ids, self._eos_ids(), inputs["input_ids"].shape[1]) if req.digits_only else None
        )
        with torch.inference_mode():
            out = self._model.generate(**inputs, generation_config=config, prefix_allowed_tokens_fn=allowed)
        new = out.sequences[0, inputs["input_ids"].shape[1] :].tolist()
        steps = []
        for pos, token_id in enumerate(new):
            logp = torch.log_softmax(out.logits[pos][0].float(), dim=-1)
            logprobs = {d: float(logp[i]) for d, i in ids.items()}
            steps.append(JudgeStep(tok.decode([token_id]), by_id.get(token_id), logprobs))
        return JudgeAnswer(tok.decode(new, skip_special_tokens=True).strip(), steps)


def _digits_only(tok, digit_ids: dict[int, int], eos: set, prompt_len: int):
    """A `prefix_allowed_tokens_fn` that lets the judge print only "0." and two digits, then end its turn."""
    dot = tok.encode(".", add_special_tokens=False)[-1]
    plan = [[digit_ids[0]], [dot], list(digit_ids.values()), list(digit_ids.values())]
    end = sorted(t for t in eos if t is not None)

    def allowed(_batch: int, ids) -> list[int]:
        t = len(ids) - prompt_len
        return plan[t] if t < len(plan) else end

    return allowed
