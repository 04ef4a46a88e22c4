"""Plugins: the folders of instructions, tools, skills and roles every capability ships as."""
