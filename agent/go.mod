module boxyard.invalid/agent

go 1.19
