"""Tables 2 and 3 regenerated from a results folder, beside the paper's numbers."""
