"""Start without torch; import it after the go file, then issue N torch.mm calls."""

import sys

from common import counted, ready, touch, wait_for

n, go_import, imported, go_call, done = int(sys.argv[1]), *sys.argv[2:6]
ready()
wait_for(go_import)
import torch  # noqa: E402 - loaded after attach on purpose

torch.set_num_threads(1)
a = torch.randn(16, 16)
touch(imported)


def body():
    for _ in range(n):
        torch.mm(a, a)


counted(go_call, done, body, announce=False)    # ready was said before the import
