"""The repository's line-length rule: no line of a Python file is longer than 100 characters.

The rule covers every *.py file outside results/ (run outputs), .git/ and hidden directories.
This test keeps it from rotting. Mutation: a 101-character line anywhere fails it.
"""
import os

MAX_LINE_LENGTH = 100
REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIPPED_TOP_LEVEL = ("results",)


def _python_files():
  for directory, subdirectories, filenames in os.walk(REPOSITORY):
    top_level = directory == REPOSITORY
    subdirectories[:] = sorted(
        name for name in subdirectories
        if not name.startswith(".") and not (top_level and name in SKIPPED_TOP_LEVEL))
    for filename in sorted(filenames):
      if filename.endswith(".py"):
        yield os.path.join(directory, filename)


def test_no_python_line_exceeds_100_characters():
  offenders = []
  for path in _python_files():
    with open(path, encoding="utf-8") as handle:
      for number, line in enumerate(handle, start=1):
        length = len(line.rstrip("\r\n"))
        if length > MAX_LINE_LENGTH:
          offenders.append(f"{os.path.relpath(path, REPOSITORY)}:{number} ({length} characters)")
  assert not offenders, (f"{len(offenders)} lines over {MAX_LINE_LENGTH} characters:\n" +
                         "\n".join(offenders))
