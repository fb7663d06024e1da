"""DQN on a small NumPy corridor world: a Q-network and a target network (keras.Sequential),
a replay buffer in Python lists, epsilon-greedy action selection with a NumPy RandomState
inside `act_step`, a `train_step` on sampled minibatches (Huber loss on the TD error
against the target network) and the target network synced with `set_weights` every
SYNC_EVERY steps.

    python examples/dqn.py [--steps N]      # N environment steps after the warm-up
"""
from __future__ import annotations

import argparse
import os
import pickle

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

DEFAULT_STEPS = 80
CELLS, ACTIONS = 5, 3  # left, stay, right
BATCH, GAMMA, SYNC_EVERY, BUFFER = 16, 0.9, 10, 500
WARMUP_TRANSITIONS = 32


class Corridor:
    """The agent starts in the middle of a corridor of CELLS cells; reward 1 at the right
    end, which ends the episode; a small cost per step; episodes are capped at 4 * CELLS
    steps."""

    def __init__(self):
        self.pos, self.t = CELLS // 2, 0

    def observe(self):
        obs = np.zeros(CELLS + 1, np.float32)
        obs[self.pos] = 1.0
        obs[CELLS] = self.t / (4 * CELLS)
        return obs

    def reset(self):
        self.pos, self.t = CELLS // 2, 0
        return self.observe()

    def step(self, action):
        self.pos = int(np.clip(self.pos + action - 1, 0, CELLS - 1))
        self.t += 1
        done = self.pos == CELLS - 1 or self.t >= 4 * CELLS
        reward = 1.0 if self.pos == CELLS - 1 else -0.01
        return self.observe(), reward, done


def q_network():
    return keras.Sequential([keras.Input((CELLS + 1,)),
                             keras.layers.Dense(32, activation="relu"),
                             keras.layers.Dense(ACTIONS)])


class Agent:
    def __init__(self, rng):
        self.rng = rng
        self.q_net = q_network()
        self.target_net = q_network()
        self.target_net.set_weights(self.q_net.get_weights())
        self.optimizer = keras.optimizers.Adam(5e-3)
        self.huber = keras.losses.Huber()
        self.buffer = []

    def act_step(self, obs, epsilon):
        if self.rng.rand() < epsilon:
            return int(self.rng.randint(ACTIONS))
        q = self.q_net(obs[None, :])
        return int(tf.argmax(q[0]))

    def remember(self, *transition):
        self.buffer.append(transition)
        if len(self.buffer) > BUFFER:
            self.buffer.pop(0)

    def sample(self):
        picks = self.rng.randint(len(self.buffer), size=BATCH)
        obs, act, rew, nxt, done = zip(*[self.buffer[i] for i in picks])
        return (tf.constant(np.stack(obs)), tf.constant(np.array(act, np.int32)),
                tf.constant(np.array(rew, np.float32)), tf.constant(np.stack(nxt)),
                tf.constant(np.array(done, np.float32)))

    def train_step(self, obs, actions, rewards, next_obs, dones):
        next_q = tf.reduce_max(self.target_net(next_obs), axis=1)
        targets = rewards + GAMMA * (1.0 - dones) * next_q
        with tf.GradientTape() as tape:
            q = tf.reduce_sum(self.q_net(obs) * tf.one_hot(actions, ACTIONS), axis=1)
            loss = self.huber(targets, q)
        grads = tape.gradient(loss, self.q_net.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.q_net.trainable_variables))
        return loss


def main(steps: int = DEFAULT_STEPS) -> dict:
    keras.utils.set_random_seed(0)
    rng = np.random.RandomState(0)
    env, agent = Corridor(), Agent(rng)
    obs = env.reset()
    losses, returns, episode_return, actions_taken = [], [], 0.0, []
    for t in range(WARMUP_TRANSITIONS + steps):
        epsilon = max(0.1, 1.0 - t / 60)
        action = agent.act_step(tf.constant(obs), epsilon)
        actions_taken.append(action)
        next_obs, reward, done = env.step(action)
        agent.remember(obs, action, reward, next_obs, float(done))
        episode_return += reward
        obs = next_obs
        if done:
            returns.append(round(episode_return, 4))
            print(f"step {t}: episode return {episode_return:.2f}")
            obs, episode_return = env.reset(), 0.0
        if t >= WARMUP_TRANSITIONS:
            losses.append(agent.train_step(*agent.sample()))
            if (t + 1) % SYNC_EVERY == 0:
                agent.target_net.set_weights(agent.q_net.get_weights())
    return {"losses": [float(v) for v in losses],
            "weights": [v.numpy() for v in agent.q_net.trainable_variables
                        + agent.target_net.trainable_variables],
            "state": {"returns": returns, "actions": actions_taken,
                      "rng": rng.get_state()[1].copy()}}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--dump", help="write the observables main() returns to this file")
    args = parser.parse_args()
    result = main(args.steps)
    if args.dump:
        with open(args.dump, "wb") as f:
            pickle.dump(result, f)
