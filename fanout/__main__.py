import sys

from fanout.cli import main

sys.exit(main())
