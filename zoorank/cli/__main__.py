from zoorank.cli import entry

entry()
