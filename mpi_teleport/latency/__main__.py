import sys

from .model import __doc__ as _DOC

if sys.argv[1:2] != ["probe"]:
    print(_DOC)
    sys.exit(2)
from .probe import probe  # noqa: E402

sys.exit(probe(sys.argv[2:]))
