"""An LSTM language model (Embedding -> LSTM -> Dense over the vocabulary) trained by
truncated backpropagation through time on a synthetic token stream. The recurrent state is
kept in `self.state` across calls of the step (the JANUS / Terra pattern) and reset every
epoch; the embedding's gradient is an IndexedSlices.

    python examples/lstm_lm.py [--steps N]
"""
from __future__ import annotations

import argparse
import os
import pickle

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

DEFAULT_STEPS = 40
VOCAB, EMBED, UNITS = 24, 8, 16
STREAMS, SEQ = 4, 8
WINDOWS_PER_EPOCH = 10


class LanguageModel(keras.Model):
    def __init__(self):
        super().__init__()
        self.embedding = keras.layers.Embedding(VOCAB, EMBED)
        self.lstm = keras.layers.LSTM(UNITS, return_sequences=True, return_state=True)
        self.head = keras.layers.Dense(VOCAB)

    def call(self, tokens, initial_state):
        x = self.embedding(tokens)
        out, h, c = self.lstm(x, initial_state=initial_state)
        return self.head(out), [h, c]


class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        self.reset_state()

    def reset_state(self):
        self.state = [tf.zeros([STREAMS, UNITS]), tf.zeros([STREAMS, UNITS])]

    def train_step(self, inputs, targets):
        with tf.GradientTape() as tape:
            logits, state = self.model(inputs, self.state)
            loss = self.loss_fn(targets, logits)
        grads = tape.gradient(loss, self.model.trainable_variables)
        grads, _ = tf.clip_by_global_norm(grads, 5.0)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
        self.state = [tf.stop_gradient(s) for s in state]
        return loss


def make_corpus(rng, length):
    """A Markov chain over the vocabulary: each token has 3 likely successors."""
    successors = rng.randint(VOCAB, size=(VOCAB, 3))
    tokens = [0]
    for _ in range(length - 1):
        tokens.append(int(successors[tokens[-1], rng.randint(3)]) if rng.rand() < 0.9
                      else int(rng.randint(VOCAB)))
    return np.array(tokens, np.int32)


def windows(corpus):
    """[STREAMS, SEQ] input/target windows for truncated BPTT, stream-major (as PTB)."""
    per_stream = len(corpus) // STREAMS
    streams = corpus[:per_stream * STREAMS].reshape(STREAMS, per_stream)
    out = []
    for start in range(0, per_stream - SEQ - 1, SEQ):
        out.append((tf.constant(streams[:, start:start + SEQ]),
                    tf.constant(streams[:, start + 1:start + SEQ + 1])))
    return out


def main(steps: int = DEFAULT_STEPS) -> dict:
    keras.utils.set_random_seed(0)
    data = windows(make_corpus(np.random.RandomState(0), STREAMS * (SEQ * WINDOWS_PER_EPOCH + 2)))
    model = LanguageModel()
    model(data[0][0], [tf.zeros([STREAMS, UNITS]), tf.zeros([STREAMS, UNITS])])
    trainer = Trainer(model, keras.optimizers.Adam(1e-2))
    losses, perplexities = [], []
    for step in range(steps):
        window = step % len(data)
        if window == 0:
            trainer.reset_state()
        losses.append(trainer.train_step(*data[window]))
        if window == len(data) - 1:
            ppl = float(np.exp(np.mean([float(v) for v in losses[-len(data):]])))
            perplexities.append(ppl)
            print(f"epoch {(step + 1) // len(data)}: perplexity {ppl:.3f}")
    return {"losses": [float(v) for v in losses],
            "weights": [v.numpy() for v in model.trainable_variables],
            "state": {"perplexities": perplexities,
                      "lstm_state": [s.numpy() for s in trainer.state]}}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--dump", help="write the observables main() returns to this file")
    args = parser.parse_args()
    result = main(args.steps)
    if args.dump:
        with open(args.dump, "wb") as f:
            pickle.dump(result, f)
