from layang.cli.commands import main

main()
