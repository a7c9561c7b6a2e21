"""Captioning with transformers: AutoModelForImageTextToText + AutoProcessor (Qwen3-VL, Qwen2.5-VL, other chat
VLMs), batched across images, N samples per image with `num_return_sequences`."""

from __future__ import annotations

import logging

import torch

from describer.backends.base import (
    Candidate,
    CaptionRequest,
    LocalCaptioner,
    Sampling,
)
from describer.backends.sampling import generation_config, transformers_kwargs
from recon_score.errors import ModelNotAvailableError, ReconScoreError
from recon_score.runtime import parse_dtype
from recon_score.seeds import derive_seed

log = logging.getLogger(__name__)


class TransformersCaptioner(LocalCaptioner):
    name = "transformers"

    def __init__(
        self,
        model: str,
        *,
        device: str,
        dtype: str = "bfloat16",
        revision: str | None = None,
        batch_size: int = 1,
        trust_remote_code: bool = False,
    ):
        self.model_name, self.device, self.revision = model, device, revision
        self.dtype = "float32" if not str(device).startswith("cuda") else dtype
        self.batch_size = max(1, batch_size)
        self.trust_remote_code = trust_remote_code
        self._model = None
        self._processor = None

    def identity(self) -> dict:
        return {
            "backend": self.name,
            **self.resolved.as_dict(),
            "dtype": self.dtype,
            "batch_size": self.batch_size,
            "device_type": torch.device(self.device).type,
            **self.text_and_pixels(),
        }

    def _load(self):
        import transformers.utils.logging as tlog
        from transformers import AutoModelForImageTextToText, AutoProcessor

        from recon_score.synthetic.shapes import build_vlm, is_shapes_folder

        tlog.disable_progress_bar()
        path = str(self.resolved.path)
        try:
            processor = AutoProcessor.from_pretrained(path, trust_remote_code=self.trust_remote_code)
            if is_shapes_folder(path):  # published sizes, random weights, built straight on the device
                model = build_vlm(path, device=self.device, dtype=parse_dtype(self.dtype))
            else:
                model = AutoModelForImageTextToText.from_pretrained(
                    path, dtype=parse_dtype(self.dtype), trust_remote_code=self.trust_remote_code
                )
        except (OSError, ValueError) as err:
            raise ModelNotAvailableError(
                self.model_name,
                searched=[path],
                reason=str(err)[:300],
                fix="Point --captioner at a folder holding a transformers VLM checkpoint "
                "(config.json, weights, processor files).",
            ) from err
        tok = getattr(processor, "tokenizer", None)
        if tok is None:
            raise ReconScoreError(f"{self.model_name}: its processor has no tokenizer; not a chat VLM?")
        tok.padding_side = "left"  # decoder-only generation continues from the right end of every row
        self._processor, self._model = processor, model.to(self.device).eval()

    def sampling_request(self, sampling: Sampling) -> dict:
        return {"generation_config": transformers_kwargs(sampling), "seed": "per image (torch.manual_seed)"}

    def unload(self) -> None:
        self._model = self._processor = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _prompt_text(self, prompt: str) -> str:
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
        return self._processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    @torch.inference_mode()
    def generate(
        self, requests: list[CaptionRequest], prompt: str, sampling: Sampling
    ) -> list[list[Candidate]]:
        if self._model is None:
            self._load()
        out: list[list[Candidate]] = []
        for start in range(0, len(requests), self.batch_size):
            chunk = requests[start : start + self.batch_size]
            out.extend(self._generate_chunk(chunk, prompt, sampling))
        return out

    def _generate_chunk(
        self, chunk: list[CaptionRequest], prompt: str, sampling: Sampling
    ) -> list[list[Candidate]]:
        text = self._prompt_text(prompt)
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
            torch.manual_seed(seed)  # also seeds CUDA
            # every sampling field explicit: nothing is inherited from the checkpoint's generation_config.json
            config = generation_config(sampling, self._model.generation_config)
            ids = self._model.generate(**inputs, generation_config=config)
        except (RuntimeError, ValueError) as err:  # OOM, a processor error on an odd image, ...
            log.warning("generation failed for %s: %s", [r.key for r in chunk], err)
            return [[Candidate(None, error=f"generation failed: {err}"[:500])] * sampling.n for _ in chunk]
        new = ids[:, inputs["input_ids"].shape[1] :]
        # as the authors' RemoteDescriber.py decodes: special tokens dropped, spaces left as the tokenizer made them
        texts = self._processor.batch_decode(
            new, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )
        eos = (
            {self._model.generation_config.eos_token_id}
            if not isinstance(self._model.generation_config.eos_token_id, list)
            else set(self._model.generation_config.eos_token_id)
        )
        pad = self._model.generation_config.pad_token_id
        results = []
        for i in range(len(chunk)):  # rows are grouped per input: [img0 x N, img1 x N, ...]
            cands = []
            for k in range(sampling.n):
                row = new[i * sampling.n + k].tolist()
                ended = any(t in eos for t in row) or (pad is not None and row and row[-1] == pad)
                cands.append(self.candidate(texts[i * sampling.n + k], "stop" if ended else "length"))
            results.append(cands)
        return results
