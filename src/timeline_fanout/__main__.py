import sys

from timeline_fanout.cli.main import main

sys.exit(main())
