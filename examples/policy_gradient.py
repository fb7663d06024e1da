"""REINFORCE on a cart-pole written in NumPy. Each episode the agent calls
`policy_step(obs)` once per environment step, reads the action probabilities with
`.numpy()` and samples the action with a NumPy RandomState; after the episode
`train_step(states, actions, returns)` (episodes differ in length) takes one gradient step
on -sum(log pi(a|s) * G). Episodes are capped at MAX_T steps.

    python examples/policy_gradient.py [--steps N]      # N episodes
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

DEFAULT_STEPS = 20
MAX_T = 40
GAMMA = 0.98


class CartPole:
    """Cart-pole dynamics (Euler integration of the classic equations of motion)."""
    gravity, cart_mass, pole_mass, half_length, force, dt = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02

    def __init__(self, rng):
        self.rng = rng
        self.s = None

    def reset(self):
        self.s = self.rng.uniform(-0.05, 0.05, size=4)
        return self.s.astype(np.float32)

    def step(self, action):
        x, x_dot, theta, theta_dot = self.s
        force = self.force if action == 1 else -self.force
        total = self.cart_mass + self.pole_mass
        cos, sin = math.cos(theta), math.sin(theta)
        temp = (force + self.pole_mass * self.half_length * theta_dot ** 2 * sin) / total
        theta_acc = (self.gravity * sin - cos * temp) / (
            self.half_length * (4.0 / 3.0 - self.pole_mass * cos ** 2 / total))
        x_acc = temp - self.pole_mass * self.half_length * theta_acc * cos / total
        self.s = np.array([x + self.dt * x_dot, x_dot + self.dt * x_acc,
                           theta + self.dt * theta_dot, theta_dot + self.dt * theta_acc])
        done = abs(self.s[0]) > 2.4 or abs(self.s[2]) > 0.21
        return self.s.astype(np.float32), 1.0, done


class Agent:
    def __init__(self):
        self.policy = keras.Sequential([keras.Input((4,)),
                                        keras.layers.Dense(16, activation="tanh"),
                                        keras.layers.Dense(2)])
        self.optimizer = keras.optimizers.Adam(1e-2)

    def policy_step(self, obs):
        logits = self.policy(obs[None, :])
        return tf.nn.softmax(logits)[0]

    def train_step(self, states, actions, returns):
        with tf.GradientTape() as tape:
            logits = self.policy(states)
            log_probs = tf.nn.log_softmax(logits)
            taken = tf.gather(log_probs, actions, batch_dims=1)
            loss = -tf.reduce_sum(taken * returns)
        grads = tape.gradient(loss, self.policy.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.policy.trainable_variables))
        return loss


def discounted(rewards):
    out, g = [], 0.0
    for r in reversed(rewards):
        g = r + GAMMA * g
        out.append(g)
    out = np.array(out[::-1], np.float32)
    return (out - out.mean()) / (out.std() + 1e-6)


def main(steps: int = DEFAULT_STEPS) -> dict:
    keras.utils.set_random_seed(0)
    rng = np.random.RandomState(0)
    env, agent = CartPole(rng), Agent()
    losses, lengths = [], []
    for episode in range(steps):
        obs, states, actions, rewards = env.reset(), [], [], []
        for _ in range(MAX_T):
            probs = agent.policy_step(tf.constant(obs)).numpy()
            action = int(rng.choice(2, p=probs / probs.sum()))
            states.append(obs)
            actions.append(action)
            obs, reward, done = env.step(action)
            rewards.append(reward)
            if done:
                break
        loss = agent.train_step(tf.constant(np.stack(states)),
                                tf.constant(np.array(actions, np.int32)[:, None]),
                                tf.constant(discounted(rewards)[:, None]))
        losses.append(float(loss))
        lengths.append(len(rewards))
        if (episode + 1) % 5 == 0:
            print(f"episode {episode + 1}: mean length {np.mean(lengths[-5:]):.1f}")
    return {"losses": losses,
            "weights": [v.numpy() for v in agent.policy.trainable_variables],
            "state": {"lengths": lengths, "rng": rng.get_state()[1].copy()}}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--dump", help="write the observables main() returns to this file")
    args = parser.parse_args()
    result = main(args.steps)
    if args.dump:
        with open(args.dump, "wb") as f:
            pickle.dump(result, f)
