"""The user-facing Markdown (README.md, docs/*.md, every package's README.md) points at files and
sections that exist, and the `python -m <module>` commands it shows name modules of this
repository that exist.

A link is `[text](target)`: a relative path (a file or folder, from the linking file's folder),
optionally with `#anchor`, which must be a heading of the target Markdown file as GitHub names it
(lower case, punctuation dropped, spaces to hyphens, `-1`, `-2` for repeats). Web links are not
checked. Pure text parsing, no TensorFlow: the tests themselves take well under a second.

Mutations: renaming a linked file, a heading a link names (e.g. REPORT.md's "Table 1: ..." when
the report changes), or a module a command runs (`python -m uci.main`) fails a test.
"""
import glob
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
COMMAND = re.compile(r"python -m ([A-Za-z_][\w.]*)")
FENCE = re.compile(r"^\s*(```|~~~)")


def _documents() -> list[str]:
  """README.md, docs/*.md and every top-level package's README.md."""
  paths = [os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
  paths += sorted(glob.glob(os.path.join(REPO, "*", "README.md")))
  return paths


def _outside_code_blocks(text: str) -> list[str]:
  lines, in_block = [], False
  for line in text.splitlines():
    if FENCE.match(line):
      in_block = not in_block
      continue
    if not in_block:
      lines.append(line)
  return lines


def github_anchor(heading: str) -> str:
  """A heading's anchor as GitHub makes it: lower case, every character that is not a letter,
  digit, underscore, hyphen or space dropped, spaces to hyphens."""
  return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors_of(path: str) -> set[str]:
  """Every heading anchor of a Markdown file (repeats numbered as GitHub numbers them)."""
  with open(path, encoding="utf-8") as handle:
    lines = _outside_code_blocks(handle.read())
  anchors, seen = set(), {}
  for line in lines:
    match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
    if not match:
      continue
    anchor = github_anchor(match.group(1))
    count = seen.get(anchor, 0)
    seen[anchor] = count + 1
    anchors.add(anchor if count == 0 else f"{anchor}-{count}")
  return anchors


def _broken_links(path: str) -> list[str]:
  with open(path, encoding="utf-8") as handle:
    lines = _outside_code_blocks(handle.read())
  # Inline code is not a link: `[a](b)` inside backticks is left alone.
  text = "\n".join(re.sub(r"`[^`]*`", "", line) for line in lines)
  broken = []
  for target in LINK.findall(text):
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):   # https:, mailto:
      continue
    file_part, _, anchor = target.partition("#")
    resolved = (os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part
                else path)
    where = f"{os.path.relpath(path, REPO)}: ({target})"
    if not os.path.exists(resolved):
      broken.append(f"{where}: no such file or folder")
    elif anchor and not (resolved.endswith(".md") and anchor in anchors_of(resolved)):
      broken.append(f"{where}: no heading with that anchor")
  return broken


def test_github_anchor_matches_githubs_rule():
  assert github_anchor("Table 1: UCI regression, one hidden layer of 50 units") == (
      "table-1-uci-regression-one-hidden-layer-of-50-units")
  assert github_anchor("Figure 4: ELBO_aux rises (LeNet-5)") == "figure-4-elbo_aux-rises-lenet-5"
  assert github_anchor("Speed (`results/benchmarks/image_speed/`)") == (
      "speed-resultsbenchmarksimage_speed")


def test_every_local_link_resolves_to_a_file_and_heading():
  broken = [entry for path in _documents() for entry in _broken_links(path)]
  assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_python_m_command_names_a_module_of_this_repository():
  missing = []
  for path in _documents():
    with open(path, encoding="utf-8") as handle:
      text = handle.read()
    for module in sorted(set(COMMAND.findall(text))):
      parts = module.rstrip(".").split(".")
      if not os.path.isdir(os.path.join(REPO, parts[0])):
        continue   # another project's module (pytest)
      candidate = os.path.join(REPO, *parts)
      if not (os.path.isfile(candidate + ".py") or
              os.path.isfile(os.path.join(candidate, "__main__.py"))):
        missing.append(f"{os.path.relpath(path, REPO)}: python -m {module}")
  assert not missing, "commands naming no module:\n" + "\n".join(missing)
