"""tests/scheduling.py: the heaviest test files go out first under --dist loadfile."""
import os

from tests import scheduling

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_timed_file_exists():
  """Catches a renamed or removed test file whose time would silently stop counting (its
  successor then queued by its test count, possibly last)."""
  missing = [path for path in scheduling.FILE_SECONDS
             if not os.path.isfile(os.path.join(REPO, path))]
  assert not missing


def test_files_go_out_longest_first_and_the_untimed_by_their_test_count():
  files = {"tests/test_many_small.py": 100, "tests/test_uci_run_time.py": 2,
           "tests/test_one.py": 1, "tests/test_uci_main.py": 40, "tests/test_few.py": 5,
           "tests/test_five.py": 5}
  assert scheduling.heaviest_first(files) == [
      "tests/test_uci_main.py", "tests/test_uci_run_time.py", "tests/test_many_small.py",
      "tests/test_few.py", "tests/test_five.py", "tests/test_one.py"]
