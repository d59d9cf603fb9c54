__version__ = "0.1.0"

# Everything public is importable from the top-level package (`from procmem import MemoryStore`).
# Importing `index` also adds `MemoryStore.search` and `MemoryStore.sync_index`.
from .core import *
from .text import *
from .store import *
from .index import *
from .retrieval import *
from .inject import *
from .bootstrap import *
from .trajectory import *
from .llm import *
from .judge import *
from .extract import *
from .gates import *
from .loop import *
