"""Hugging Face `transformers` architectures for scripts/zoo_coverage.py --transformers: each built from its
config with random weights (nothing downloaded; convolutions and linear layers drawn with a 1/sqrt(fan-in)
spread so deep stacks keep their scale), shrunk to two layers and a small hidden size, exported by
torch.onnx.export (opset 17) with the inputs it takes in use: token ids (and, where the model takes one, an
attention mask with padding), pixels, log-mel features or raw audio. The output is the last hidden state.
"""
from __future__ import annotations

import io
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

import zoo
from onnx2gemmini.data import padding_masks

SEQ = 16          # tokens per text sample
VOCAB = 1000
IMAGE = 32        # pixels per side of the vision models
TEXT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=VOCAB,
            max_position_embeddings=64)
VISION = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=IMAGE,
              patch_size=8)


@dataclass(frozen=True)
class Model:
    """One architecture: its config and model class names in `transformers`, the config's overrides and what
    it reads ("text", "text+mask": ids and an attention mask, "image", "features": log-mel [80][128],
    "audio": 4000 raw samples)."""

    name: str
    config: str
    model: str
    overrides: dict
    reads: str

    @property
    def family(self) -> str:
        return self.model.removesuffix("Model").removesuffix("EncoderModel").removesuffix("TextModel") \
            .removesuffix("VisionModel")


MODELS = [
    Model("bert", "BertConfig", "BertModel", TEXT, "text+mask"),
    Model("distilbert", "DistilBertConfig", "DistilBertModel",
          dict(dim=64, n_layers=2, n_heads=4, hidden_dim=128, vocab_size=VOCAB, max_position_embeddings=64),
          "text+mask"),
    Model("roberta", "RobertaConfig", "RobertaModel", dict(TEXT, max_position_embeddings=66), "text+mask"),
    Model("albert", "AlbertConfig", "AlbertModel", dict(TEXT, embedding_size=32), "text+mask"),
    Model("electra", "ElectraConfig", "ElectraModel", dict(TEXT, embedding_size=32), "text+mask"),
    Model("mobilebert", "MobileBertConfig", "MobileBertModel",
          dict(TEXT, intermediate_size=64, embedding_size=32, intra_bottleneck_size=32, true_hidden_size=32),
          "text+mask"),
    Model("deberta_v2", "DebertaV2Config", "DebertaV2Model", TEXT, "text+mask"),
    Model("t5_encoder", "T5Config", "T5EncoderModel",
          dict(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, vocab_size=VOCAB), "text+mask"),
    Model("clip_text", "CLIPTextConfig", "CLIPTextModel", dict(TEXT, projection_dim=32), "text+mask"),
    Model("gpt2", "GPT2Config", "GPT2Model", dict(n_embd=64, n_layer=2, n_head=4, vocab_size=VOCAB, n_positions=64),
          "text+mask"),
    Model("llama", "LlamaConfig", "LlamaModel", dict(TEXT, num_key_value_heads=4), "text+mask"),
    Model("vit", "ViTConfig", "ViTModel", VISION, "image"),
    Model("deit", "DeiTConfig", "DeiTModel", VISION, "image"),
    Model("beit", "BeitConfig", "BeitModel", VISION, "image"),
    Model("swin", "SwinConfig", "SwinModel", dict(image_size=IMAGE, patch_size=4, embed_dim=16, depths=[1, 1],
                                                   num_heads=[2, 4], window_size=4), "image"),
    Model("convnext", "ConvNextConfig", "ConvNextModel", dict(hidden_sizes=[16, 32], depths=[1, 1], num_stages=2,
                                                              image_size=IMAGE), "image"),
    Model("mobilevit", "MobileViTConfig", "MobileViTModel", dict(image_size=64, hidden_sizes=[32, 48, 64],
                                                                 neck_hidden_sizes=[8, 16, 24, 32, 40, 48, 64]),
          "image"),
    Model("levit", "LevitConfig", "LevitModel", dict(image_size=64, hidden_sizes=[32, 48, 64],
                                                    num_attention_heads=[1, 2, 2], depths=[1, 1, 1], key_dim=[8, 8, 8]),
          "image"),
    Model("clip_vision", "CLIPVisionConfig", "CLIPVisionModel", VISION, "image"),
    Model("whisper_encoder", "WhisperConfig", "WhisperEncoder",
          dict(d_model=64, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128, num_mel_bins=80,
               max_source_positions=64, vocab_size=VOCAB), "features"),
    Model("wav2vec2", "Wav2Vec2Config", "Wav2Vec2Model", dict(TEXT, conv_dim=(32, 32, 32), conv_stride=(5, 4, 4),
                                                              conv_kernel=(10, 8, 8), num_conv_pos_embeddings=16,
                                                              num_conv_pos_embedding_groups=4), "audio"),
]

# Each text model again with token ids alone (the mask folded away by the simplifier: every position attends).
MODELS += [replace(m, name=f"{m.name}_ids_only", reads="text") for m in MODELS if m.reads == "text+mask"]


def _transformers():
    zoo.torchvision_models()  # transformers imports torchvision: make it importable with the CPU torch first
    import transformers
    return transformers


def version() -> str:
    return _transformers().__version__


def build(model: Model):
    t = _transformers()
    config = getattr(t, model.config)(**model.overrides)
    if model.model == "WhisperEncoder":
        from transformers.models.whisper.modeling_whisper import WhisperEncoder
        return WhisperEncoder(config)
    return getattr(t, model.model)(config)


def inputs(model: Model, samples: int, seed: int) -> dict[str, np.ndarray]:
    """Synthetic samples by input name, axis 0 the sample: token ids uniform over the vocabulary, masks padded
    after a random length of at least a quarter, smooth images, sums of tones."""
    rng = np.random.default_rng(seed)
    if model.reads.startswith("text"):
        data = {"input_ids": rng.integers(0, VOCAB, (samples, 1, SEQ)).astype(np.int64)}
        if model.reads == "text+mask":
            data["attention_mask"] = padding_masks(rng, (samples, 1, SEQ), np.int64, shortest=SEQ // 4)
        return data
    if model.reads == "image":
        side = model.overrides.get("image_size", IMAGE)
        return {"pixel_values": zoo.calibration(zoo.Arch(model.name, model.family, None, (1, 3, side, side)),
                                                samples, seed)}
    if model.reads == "features":
        t = np.linspace(0, 1, 128, dtype=np.float32)
        f = rng.uniform(1, 20, (samples, 1, 80, 1)).astype(np.float32)
        return {"input_features": np.sin(2 * np.pi * f * t).astype(np.float32)}
    t = np.arange(4000, dtype=np.float32) / 16000
    tones = rng.uniform(100, 2000, (samples, 1, 3, 1)).astype(np.float32)
    return {"input_values": (np.sin(2 * np.pi * tones * t).sum(axis=2) / 3).astype(np.float32)}


def export(model: Model, path: Path, seed: int = 0) -> Path:
    torch = zoo._torch()
    torch.manual_seed(seed)
    names = list(inputs(model, 1, 0))
    module = build(model).eval()
    with torch.no_grad():  # Hugging Face's init (std 0.02) makes deep random convolution stacks decay to 0
        for m in module.modules():
            if isinstance(m, (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d)):
                fan_in = m.weight[0].numel()
                m.weight.normal_(0, fan_in ** -0.5)
            elif isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = module

        def forward(self, *args):
            out = self.inner(**dict(zip(names, args)))
            return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]

    example = tuple(torch.from_numpy(v[0]) for v in inputs(model, 1, 0).values())
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        buffer = io.BytesIO()
        torch.onnx.export(Wrapped(), example, buffer, dynamo=False, opset_version=17, input_names=names,
                          output_names=["last_hidden_state"])
    path.write_bytes(buffer.getvalue())
    return path


def find(name: str) -> Model:
    return next(m for m in MODELS if m.name == name)

