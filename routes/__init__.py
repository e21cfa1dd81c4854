"""routes: the operator table (ports, operators, rules, checks, graph, codec)."""
