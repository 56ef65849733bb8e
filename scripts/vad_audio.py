"""Speech streams made locally for voice-activity detectors: espeak-ng speech between pauses, over noise.

    from vad_audio import speech_stream, chunks
    audio, speaking = speech_stream(["A sentence.", ...], seed=0)   # 16 kHz float32, ground truth per sample
    inputs = chunks(audio, 512, 64)                                   # [steps, 1, 576]: context + chunk

Debian's espeak-ng (`apt-get install espeak-ng`) speaks the sentences with a voice, speed and pitch drawn per
sentence; pauses of 0.3 to 1.5 s separate them; the whole stream gets pink-ish background noise at an SNR drawn
per stream (10 to 30 dB) and a random gain. Nothing is downloaded. `speaking` marks the samples espeak-ng
voiced (above 2% of the sentence's peak), the reference a VAD is judged by besides the fp32 model itself.
"""
from __future__ import annotations

import io
import shutil
import subprocess
import wave

import numpy as np

RATE = 16000
VOICES = ("en-us", "en-gb", "en-gb-scotland", "en-us+f3", "en-gb+m3", "en-us+f2")


def have_espeak() -> bool:
    return shutil.which("espeak-ng") is not None


def spoken(text: str, voice: str, speed: int, pitch: int) -> np.ndarray:
    """espeak-ng's rendering of `text` at 16 kHz, float32 in [-1, 1]."""
    wav = subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "--stdout", text],
                         check=True, capture_output=True).stdout
    with wave.open(io.BytesIO(wav)) as f:
        rate, frames = f.getframerate(), f.readframes(f.getnframes())
    x = np.frombuffer(frames, np.int16).astype(np.float64) / 32768.0
    t = np.arange(int(len(x) * RATE / rate)) * (rate / RATE)  # linear resampling to 16 kHz
    return np.interp(t, np.arange(len(x)), x).astype(np.float32)


def noise(count: int, rng: np.random.Generator) -> np.ndarray:
    """Unit-power noise whose spectrum falls as 1/f (a room, a fan), by filtering white noise."""
    white = rng.standard_normal(count + 4096)
    spectrum = np.fft.rfft(white)
    spectrum /= np.sqrt(np.maximum(np.arange(len(spectrum)), 1.0))
    pink = np.fft.irfft(spectrum, len(white))[:count]
    return (pink / np.sqrt(np.mean(pink ** 2))).astype(np.float32)


def speech_stream(texts: list[str], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(audio, speaking): the sentences spoken in turn between pauses, over noise; `speaking` is True where
    the speech itself is above 2% of its sentence's peak."""
    rng = np.random.default_rng(seed)
    parts, truth = [], []
    for text in texts:
        pause = int(rng.uniform(0.3, 1.5) * RATE)
        parts.append(np.zeros(pause, np.float32))
        truth.append(np.zeros(pause, bool))
        voice = VOICES[rng.integers(len(VOICES))]
        said = spoken(text, voice, int(rng.integers(130, 190)), int(rng.integers(30, 70)))
        said *= np.float32(rng.uniform(0.2, 0.9) / max(np.abs(said).max(), 1e-6))
        envelope = np.convolve(np.abs(said), np.ones(160) / 160, mode="same")
        parts.append(said)
        truth.append(envelope > 0.02 * envelope.max())
    audio, speaking = np.concatenate(parts), np.concatenate(truth)
    speech_power = np.mean(audio[speaking] ** 2) if speaking.any() else 1e-4
    snr_db = rng.uniform(10, 30)
    audio = audio + noise(len(audio), rng) * np.float32(np.sqrt(speech_power / 10 ** (snr_db / 10)))
    return np.clip(audio, -1, 1).astype(np.float32), speaking


def chunks(audio: np.ndarray, size: int = 512, context: int = 64) -> np.ndarray:
    """[steps, 1, context + size]: each chunk of `size` samples after the `context` samples before it
    (zeros before the first), as silero-vad's own wrapper feeds its ONNX model."""
    steps = len(audio) // size
    padded = np.concatenate([np.zeros(context, np.float32), audio[:steps * size]])
    return np.stack([padded[i * size:i * size + context + size] for i in range(steps)])[:, None, :]


def chunk_truth(speaking: np.ndarray, size: int = 512) -> np.ndarray:
    """Per chunk: speech if at least half its samples are speech."""
    steps = len(speaking) // size
    return speaking[:steps * size].reshape(steps, size).mean(1) >= 0.5
