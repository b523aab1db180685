"""``python -m gradfix``: the same as the ``gradfix`` command."""

from gradfix.cli import main

if __name__ == "__main__":
    main()
