from prefilltui.cli import main

raise SystemExit(main())
