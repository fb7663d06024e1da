"""A variational autoencoder (the TF "convolutional VAE" tutorial's structure, with dense
layers): a subclassed keras.Model with encode / reparameterize / decode, the loss in
module-level functions (`log_normal_pdf`, `compute_loss`) and `train_step(model, x,
optimizer)` at module level. The reparameterisation noise comes from the model's
tf.random.Generator, so every mode draws the same numbers.

    python examples/vae.py [--steps N]
"""
from __future__ import annotations

import argparse
import math
import os
import pickle

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

DEFAULT_STEPS = 60
BATCH, PIXELS, HIDDEN, LATENT = 32, 64, 32, 4


class VAE(keras.Model):
    def __init__(self, latent_dim, seed):
        super().__init__()
        self.latent_dim = latent_dim
        self.encoder = keras.Sequential([keras.Input((PIXELS,)),
                                         keras.layers.Dense(HIDDEN, activation="relu"),
                                         keras.layers.Dense(2 * latent_dim)])
        self.decoder = keras.Sequential([keras.Input((latent_dim,)),
                                         keras.layers.Dense(HIDDEN, activation="relu"),
                                         keras.layers.Dense(PIXELS)])
        self.noise = tf.random.Generator.from_seed(seed)

    def encode(self, x):
        mean, logvar = tf.split(self.encoder(x), num_or_size_splits=2, axis=1)
        return mean, logvar

    def reparameterize(self, mean, logvar):
        eps = self.noise.normal(shape=tf.shape(mean))
        return eps * tf.exp(logvar * 0.5) + mean

    def decode(self, z):
        return self.decoder(z)


def log_normal_pdf(sample, mean, logvar, raxis=1):
    log2pi = math.log(2.0 * math.pi)
    return tf.reduce_sum(-0.5 * ((sample - mean) ** 2.0 * tf.exp(-logvar) + logvar + log2pi),
                         axis=raxis)


def compute_loss(model, x):
    mean, logvar = model.encode(x)
    z = model.reparameterize(mean, logvar)
    x_logit = model.decode(z)
    cross_ent = tf.nn.sigmoid_cross_entropy_with_logits(logits=x_logit, labels=x)
    logpx_z = -tf.reduce_sum(cross_ent, axis=1)
    logpz = log_normal_pdf(z, 0.0, 0.0)
    logqz_x = log_normal_pdf(z, mean, logvar)
    return -tf.reduce_mean(logpx_z + logpz - logqz_x)


def train_step(model, x, optimizer):
    with tf.GradientTape() as tape:
        loss = compute_loss(model, x)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return loss


def make_images(rng, count):
    """Binary 8x8 images: a random horizontal and vertical bar each, with pixel noise."""
    images = np.zeros((count, 8, 8), np.float32)
    for i in range(count):
        images[i, rng.randint(8), :] = 1.0
        images[i, :, rng.randint(8)] = 1.0
    flips = rng.rand(count, 8, 8) < 0.05
    return np.where(flips, 1.0 - images, images).reshape(count, PIXELS).astype(np.float32)


def main(steps: int = DEFAULT_STEPS) -> dict:
    keras.utils.set_random_seed(0)
    images = make_images(np.random.RandomState(0), BATCH * 8)
    batches = [tf.constant(images[i:i + BATCH]) for i in range(0, len(images), BATCH)]
    model = VAE(LATENT, seed=7)
    model.decode(model.reparameterize(*model.encode(batches[0])))  # builds the weights
    optimizer = keras.optimizers.Adam(1e-3)
    losses, elbos = [], []
    for step in range(steps):
        losses.append(train_step(model, batches[step % len(batches)], optimizer))
        if (step + 1) % len(batches) == 0:
            elbo = -float(tf.reduce_mean(tf.stack(losses[-len(batches):])))
            elbos.append(elbo)
            print(f"epoch {(step + 1) // len(batches)}: ELBO {elbo:.3f}")
    return {"losses": [float(v) for v in losses],
            "weights": [v.numpy() for v in model.trainable_variables],
            "state": {"elbos": elbos, "noise_state": model.noise.state.numpy()}}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--dump", help="write the observables main() returns to this file")
    args = parser.parse_args()
    result = main(args.steps)
    if args.dump:
        with open(args.dump, "wb") as f:
            pickle.dump(result, f)
