"""The OpenAI-compatible client against a local HTTP server, and the vLLM path behind its import guard."""

import base64
import io
import json
import sys
import threading
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from PIL import Image

from describer.backends import CaptionRequest, Sampling, build_captioner


class FakeServer:
    """A loopback OpenAI-compatible /v1/chat/completions: deterministic in the seed, with scripted failures."""

    def __init__(self, *, honour_n=True, fail_first=0, api_key="sk-test"):
        self.requests: list[dict] = []
        self.fail_left = fail_first
        self.honour_n, self.api_key = honour_n, api_key
        self.served = ["m"]
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                server.requests.append(
                    {"path": self.path, "auth": self.headers.get("Authorization"), "body": None}
                )
                if server.api_key and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                    self.send_response(401)
                    self.end_headers()
                    return
                data = json.dumps({"object": "list", "data": [{"id": m} for m in server.served]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(
                    {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
                )
                if server.fail_left > 0:
                    server.fail_left -= 1
                    self.send_response(503)
                    self.end_headers()
                    return
                n = body.get("n", 1) if server.honour_n else 1
                url = body["messages"][0]["content"][0]["image_url"]["url"]
                size = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).size
                choices = []
                for k in range(n):
                    text = f"caption {body['seed'] + k} of a {size[0]}x{size[1]} tile"
                    finish = "stop"
                    if "EMPTY" in body["messages"][0]["content"][1]["text"] and k == 1:
                        text = ""
                    if "FILTER" in body["messages"][0]["content"][1]["text"] and k == 0:
                        finish = "content_filter"
                    choices.append(
                        {
                            "index": k,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": finish,
                        }
                    )
                data = json.dumps({"choices": choices}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _reqs(k=2):
    rng = np.random.default_rng(0)
    return [
        CaptionRequest(
            Image.fromarray(rng.integers(0, 255, (32, 48, 3), dtype=np.uint8)),
            seed=100 * (i + 1),
            key=f"img{i}",
        )
        for i in range(k)
    ]


def test_openai_client_sends_images_and_seeds(monkeypatch):
    monkeypatch.setenv("TEST_KEY", "sk-test")
    with FakeServer(fail_first=1) as srv:  # the first call gets a 503: retried
        cap = build_captioner("openai", "qwen3-vl", base_url=srv.url, api_key_env="TEST_KEY", concurrency=2)
        cap.backoff = 0.01
        out = cap.generate(_reqs(), "Describe.", Sampling(n=3, temperature=0.8, top_p=0.9, max_new_tokens=64))
    assert [[c.text for c in cs] for cs in out] == [
        ["caption 100 of a 48x32 tile", "caption 101 of a 48x32 tile", "caption 102 of a 48x32 tile"],
        ["caption 200 of a 48x32 tile", "caption 201 of a 48x32 tile", "caption 202 of a 48x32 tile"],
    ]
    ok = [r for r in srv.requests if r["body"]]
    body = ok[-1]["body"]
    assert ok[-1]["path"] == "/v1/chat/completions" and ok[-1]["auth"] == "Bearer sk-test"
    assert (
        body["model"] == "qwen3-vl" and body["n"] == 3 and body["temperature"] == 0.8 and body["top_p"] == 0.9
    )
    assert body["max_tokens"] == 64
    assert body["messages"][0]["content"][0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert len(srv.requests) == 3  # 2 images + 1 retry
    assert cap.identity()["api_key_env"] == "TEST_KEY" and "sk-test" not in json.dumps(cap.identity())


def test_openai_client_fills_n_when_server_ignores_it():
    with FakeServer(honour_n=False) as srv:
        cap = build_captioner("openai", "m", base_url=srv.url)
        out = cap.generate(_reqs(1), "Describe.", Sampling(n=3))
    assert [c.text for c in out[0]] == [f"caption {s} of a 48x32 tile" for s in (100, 101, 102)]
    assert [r["body"]["seed"] for r in srv.requests] == [100, 101, 102]


def test_openai_per_candidate_errors():
    with FakeServer() as srv:
        cap = build_captioner("openai", "m", base_url=srv.url)
        empty = cap.generate(_reqs(1), "EMPTY please", Sampling(n=3))[0]
        filtered = cap.generate(_reqs(1), "FILTER please", Sampling(n=2))[0]
    assert empty[0].text and empty[1].error == "empty generation" and empty[2].text
    assert "refused" in filtered[0].error and filtered[1].text


def test_openai_server_down_is_a_candidate_error():
    with FakeServer(fail_first=100) as srv:
        cap = build_captioner("openai", "m", base_url=srv.url)
        cap.backoff, cap.max_retries = 0.001, 2
        out = cap.generate(_reqs(1), "Describe.", Sampling(n=2))[0]
    assert all("failed after 3 attempts" in c.error for c in out)


def test_vllm_is_optional():
    if "vllm" in sys.modules or __import__("importlib").util.find_spec("vllm") is not None:
        pytest.skip("vLLM installed: the real engine path is exercised by test_vllm_real")
    from recon_score.errors import ReconScoreError

    cap = build_captioner("vllm", "smoke:qwen3-vl")
    with pytest.raises(ReconScoreError, match=r"pip install 'reconscore\[vllm\]'"):
        cap.generate(_reqs(1), "Describe.", Sampling(n=2))


def test_vllm_code_path_with_a_stand_in_engine(monkeypatch):
    """The request/response mapping behind the import guard, against a minimal stand-in of vllm's API."""
    made = {}

    class SamplingParams:
        def __init__(self, **kw):
            self.kw = kw

    class LLM:
        def __init__(self, **kw):
            made["llm"] = kw

        def generate(self, inputs, sampling_params, use_tqdm):
            made["inputs"], made["params"] = inputs, [p.kw for p in sampling_params]
            outs = []
            for p in sampling_params:
                o = [
                    types.SimpleNamespace(text=f"s{p.kw['seed']}-{k}", finish_reason="stop")
                    for k in range(p.kw["n"])
                ]
                o[-1].text = ""
                outs.append(types.SimpleNamespace(outputs=o))
            return outs

    monkeypatch.setitem(
        sys.modules,
        "vllm",
        types.SimpleNamespace(SamplingParams=SamplingParams, LLM=LLM, __version__="stand-in"),
    )
    cap = build_captioner("vllm", "smoke:qwen3-vl")
    out = cap.generate(_reqs(2), "Describe.", Sampling(n=3, temperature=0.8, top_p=0.9, max_new_tokens=512))
    assert made["params"][0] == {
        "n": 3,
        "temperature": 0.8,
        "top_p": 0.9,
        "top_k": -1,  # Sampling's default top_k 0 = off; -1 is vLLM's "off"
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "max_tokens": 512,
        "seed": 100,
    }
    assert made["params"][1]["seed"] == 200
    assert made["llm"]["limit_mm_per_prompt"] == {"image": 1} and made["llm"]["trust_remote_code"] is False
    assert "<|vision_start|><|image_pad|><|vision_end|>" in made["inputs"][0]["prompt"]
    assert isinstance(made["inputs"][0]["multi_modal_data"]["image"], Image.Image)
    assert [c.text for c in out[0]] == ["s100-0", "s100-1", None] and out[0][2].error == "empty generation"
    assert cap.identity()["vllm"] == "stand-in"


def test_vllm_text_llm_gets_the_engine_bounds_and_a_seed_per_prompt(monkeypatch):
    """The text-only engine (generate's LLM) is bounded like the VLM's, and each prompt samples with its own seed."""
    from describer.backends import build_backend

    made = {}

    class LLM:
        def __init__(self, **kw):
            made["llm"] = kw

        def chat(self, messages, sampling_params, use_tqdm):
            made["messages"], made["params"] = messages, [p.kw for p in sampling_params]
            done = types.SimpleNamespace(text=" a reply ", finish_reason="stop")
            return [types.SimpleNamespace(outputs=[done]) for _ in messages]

    stand_in = types.SimpleNamespace(
        SamplingParams=lambda **kw: types.SimpleNamespace(kw=kw), LLM=LLM, __version__="stand-in"
    )
    monkeypatch.setitem(sys.modules, "vllm", stand_in)
    llm = build_backend("vllm", "smoke:qwen3-text", text_only=True)
    out = llm.complete(["first", "second"], Sampling(n=1, seed=7, max_new_tokens=32))
    assert made["llm"]["gpu_memory_utilization"] == 0.85 and made["llm"]["max_model_len"] == 8192
    assert "limit_mm_per_prompt" not in made["llm"] and made["llm"]["trust_remote_code"] is False
    assert made["messages"] == [
        [{"role": "user", "content": "first"}],
        [{"role": "user", "content": "second"}],
    ]
    seeds = [p["seed"] for p in made["params"]]
    assert len(set(seeds)) == 2 and all(p["n"] == 1 and p["max_tokens"] == 32 for p in made["params"])
    assert [c.text for c in out] == ["a reply"] * 2


@pytest.mark.skipif(__import__("importlib").util.find_spec("vllm") is None, reason="vLLM not installed")
def test_vllm_real():
    cap = build_captioner("vllm", "smoke:qwen3-vl", dtype="float32")
    out = cap.generate(_reqs(1), "Describe.", Sampling(n=2, max_new_tokens=4))
    assert len(out[0]) == 2


def test_openai_preflight_checks_the_server_once(monkeypatch):
    """Unreachable server, rejected key and unknown model fail before any image, in one request, naming why."""
    import socket

    from recon_score.errors import ReconScoreError

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with FakeServer() as srv:
        build_captioner("openai", "m", base_url=srv.url).preflight()
        assert [r["path"] for r in srv.requests] == ["/v1/models"]
        with pytest.raises(ReconScoreError, match="does not serve 'other'; it serves m"):
            build_captioner("openai", "other", base_url=srv.url).preflight()
        monkeypatch.setenv("OPENAI_API_KEY", "wrong")
        with pytest.raises(
            ReconScoreError, match=r"rejected the request \(HTTP 401\).*OPENAI_API_KEY \(set\)"
        ):
            build_captioner("openai", "m", base_url=srv.url).preflight()
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ReconScoreError, match="cannot reach"):
        build_captioner("openai", "m", base_url=f"http://127.0.0.1:{port}/v1").preflight()


def test_describe_fails_fast_when_the_server_is_down(tmp_path, capsys):
    import socket

    from eval.cli import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [
        "describe",
        "--preset",
        "smoke",
        "--backend",
        "openai",
        "--base-url",
        f"http://127.0.0.1:{port}/v1",
    ]
    assert main([*argv, "--captioner", "m", "--out", str(tmp_path / "d")]) == 1
    assert "cannot reach" in capsys.readouterr().err
    assert not (tmp_path / "d" / "candidates.jsonl").exists()
