"""Input and output of source files, apart from what the rules decide.

- :mod:`gradfix.fileio.files`: reading (encodings, binary and non-UTF-8 files refused with one
  line), discovery (excludes, ``.gitignore``), atomic writing;
- :mod:`gradfix.fileio.gitfiles`: which files git ignores or changed since a ref;
- :mod:`gradfix.fileio.text`: line splitting shared by diffs, notebooks and the language server;
- :mod:`gradfix.fileio.diff`: unified diffs (patience algorithm), notebook-aware.

Nothing here imports the engine or the rules; :mod:`gradfix.notebook` (checking notebooks)
builds on it.
"""
