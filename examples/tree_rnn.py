"""A TreeRNN (recursive neural network) over random binary trees of Python objects: a leaf
looks up its word's embedding, an inner node combines its children's vectors, recursively
in Python; the root's vector is classified. The label is whether the tree holds more
"positive" words (ids below VOCAB // 2) than negative ones. Plain tf.Variables and a Keras
SGD optimizer; `train_step(tree, label)` is a method.

    python examples/tree_rnn.py [--steps N]
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
VOCAB, DIM = 20, 8


class Leaf:
    def __init__(self, word):
        self.word = word


class Node:
    def __init__(self, left, right):
        self.left, self.right = left, right


def random_tree(rng, depth=0):
    if depth >= 3 or (depth > 0 and rng.rand() < 0.3):
        return Leaf(int(rng.randint(VOCAB)))
    return Node(random_tree(rng, depth + 1), random_tree(rng, depth + 1))


def words(tree):
    return [tree.word] if isinstance(tree, Leaf) else words(tree.left) + words(tree.right)


class TreeRNN:
    def __init__(self, rng):
        def var(*shape):
            return tf.Variable(rng.normal(scale=0.3, size=shape).astype(np.float32))
        self.embedding = var(VOCAB, DIM)
        self.w = var(2 * DIM, DIM)
        self.b = tf.Variable(tf.zeros([DIM]))
        self.w_out = var(DIM, 2)
        self.b_out = tf.Variable(tf.zeros([2]))
        self.variables = [self.embedding, self.w, self.b, self.w_out, self.b_out]
        self.optimizer = keras.optimizers.SGD(0.1)
        self.nodes_seen = 0

    def encode(self, tree):
        self.nodes_seen += 1
        if isinstance(tree, Leaf):
            return tf.nn.embedding_lookup(self.embedding, [tree.word])
        children = tf.concat([self.encode(tree.left), self.encode(tree.right)], axis=1)
        return tf.tanh(tf.matmul(children, self.w) + self.b)

    def train_step(self, tree, label):
        with tf.GradientTape() as tape:
            logits = tf.matmul(self.encode(tree), self.w_out) + self.b_out
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=[label], logits=logits))
        grads = tape.gradient(loss, self.variables)
        self.optimizer.apply_gradients(zip(grads, self.variables))
        return loss


def main(steps: int = DEFAULT_STEPS) -> dict:
    keras.utils.set_random_seed(0)
    rng = np.random.RandomState(0)
    trees = [random_tree(rng) for _ in range(20)]
    labels = [int(sum(w < VOCAB // 2 for w in words(t)) * 2 > len(words(t))) for t in trees]
    model = TreeRNN(rng)
    losses = []
    for step in range(steps):
        losses.append(model.train_step(trees[step % len(trees)], labels[step % len(trees)]))
        if (step + 1) % len(trees) == 0:
            mean = float(np.mean([float(v) for v in losses[-len(trees):]]))
            print(f"epoch {(step + 1) // len(trees)}: mean loss {mean:.4f}")
    return {"losses": [float(v) for v in losses],
            "weights": [v.numpy() for v in model.variables],
            "state": {"nodes_seen": model.nodes_seen}}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--dump", help="write the observables main() returns to this file")
    args = parser.parse_args()
    result = main(args.steps)
    if args.dump:
        with open(args.dump, "wb") as f:
            pickle.dump(result, f)
