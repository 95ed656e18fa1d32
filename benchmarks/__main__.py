import sys

from .runner import main

try:
    sys.exit(main())
except KeyboardInterrupt:
    if "--child" not in sys.argv:
        print("interrupted; every process the benchmarks started was stopped", file=sys.stderr)
    sys.exit(130)
