"""A GAN on a 2-D Gaussian-mixture: a generator and a discriminator (keras.Sequential), two
optimizers, and a step that updates the discriminator then the generator, each under its
own GradientTape (the DCGAN tutorial's losses as module-level helpers). Noise comes from a
tf.random.Generator, so every mode draws the same numbers.

    python examples/gan.py [--steps N]
"""
from __future__ import annotations

import argparse
import os
import pickle

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

DEFAULT_STEPS = 60
BATCH, NOISE, HIDDEN = 32, 8, 32
cross_entropy = keras.losses.BinaryCrossentropy(from_logits=True)


def discriminator_loss(real_output, fake_output):
    real_loss = cross_entropy(tf.ones_like(real_output), real_output)
    fake_loss = cross_entropy(tf.zeros_like(fake_output), fake_output)
    return real_loss + fake_loss


def generator_loss(fake_output):
    return cross_entropy(tf.ones_like(fake_output), fake_output)


class GAN:
    def __init__(self, seed):
        self.generator = keras.Sequential([keras.Input((NOISE,)),
                                           keras.layers.Dense(HIDDEN, activation="relu"),
                                           keras.layers.Dense(HIDDEN, activation="relu"),
                                           keras.layers.Dense(2)])
        self.discriminator = keras.Sequential([keras.Input((2,)),
                                               keras.layers.Dense(HIDDEN),
                                               keras.layers.LeakyReLU(0.2),
                                               keras.layers.Dense(1)])
        self.generator_optimizer = keras.optimizers.Adam(2e-3, beta_1=0.5)
        self.discriminator_optimizer = keras.optimizers.Adam(2e-3, beta_1=0.5)
        self.noise = tf.random.Generator.from_seed(seed)

    def train_step(self, real):
        z = self.noise.normal([BATCH, NOISE])
        with tf.GradientTape() as disc_tape:
            fake = self.generator(z, training=True)
            real_output = self.discriminator(real, training=True)
            fake_output = self.discriminator(fake, training=True)
            d_loss = discriminator_loss(real_output, fake_output)
        d_grads = disc_tape.gradient(d_loss, self.discriminator.trainable_variables)
        self.discriminator_optimizer.apply_gradients(
            zip(d_grads, self.discriminator.trainable_variables))

        z = self.noise.normal([BATCH, NOISE])
        with tf.GradientTape() as gen_tape:
            fake_output = self.discriminator(self.generator(z, training=True), training=True)
            g_loss = generator_loss(fake_output)
        g_grads = gen_tape.gradient(g_loss, self.generator.trainable_variables)
        self.generator_optimizer.apply_gradients(
            zip(g_grads, self.generator.trainable_variables))
        return d_loss, g_loss


def real_batches(rng, count):
    centres = np.array([[2.0, 0.0], [-2.0, 0.0], [0.0, 2.0], [0.0, -2.0]], np.float32)
    out = []
    for _ in range(count):
        pick = rng.randint(len(centres), size=BATCH)
        out.append(tf.constant(centres[pick] + 0.2 * rng.normal(size=(BATCH, 2)).astype(np.float32)))
    return out


def main(steps: int = DEFAULT_STEPS) -> dict:
    keras.utils.set_random_seed(0)
    data = real_batches(np.random.RandomState(0), 10)
    gan = GAN(seed=1)
    d_losses, g_losses = [], []
    for step in range(steps):
        d_loss, g_loss = gan.train_step(data[step % len(data)])
        d_losses.append(d_loss)
        g_losses.append(g_loss)
        if (step + 1) % 20 == 0:
            print(f"step {step + 1}: d_loss {float(d_loss):.4f} g_loss {float(g_loss):.4f}")
    return {"losses": [float(v) for v in d_losses] + [float(v) for v in g_losses],
            "weights": [v.numpy() for v in gan.generator.trainable_variables
                        + gan.discriminator.trainable_variables],
            "state": {"noise_state": gan.noise.state.numpy(),
                      "iterations": (int(gan.generator_optimizer.iterations.numpy()),
                                     int(gan.discriminator_optimizer.iterations.numpy()))}}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--dump", help="write the observables main() returns to this file")
    args = parser.parse_args()
    result = main(args.steps)
    if args.dump:
        with open(args.dump, "wb") as f:
            pickle.dump(result, f)
