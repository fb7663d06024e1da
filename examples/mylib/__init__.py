"""mylib: a small library that ships precompiled with gpe (see README.md in this folder)."""
