"""``python -m gradfix``: the same as the ``gradfix`` command."""

from gradfix.cli import run

if __name__ == "__main__":
    run()
