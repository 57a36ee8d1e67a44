#!/bin/sh
# The entrypoint of every workbench image: run the command under the workbench agent, which
# forwards signals and the exit code and reports the container's GPUs as metric lines in the
# output (docs/monitoring.md, "The agent's records").
#
# Passed straight through (exec, no second agent) when:
# - the command already starts with the agent: workbench's local container runtime adds it
#   itself, from the image's org.workbench.agent label;
# - stdin is a terminal (`docker run -it IMAGE bash`): an interactive shell needs its tty;
# - WORKBENCH_AGENT=0 asks for the bare command.
set -e
if [ "$#" -eq 0 ]; then
    set -- python3
fi
if [ "${WORKBENCH_AGENT:-1}" = "0" ] || [ -t 0 ]; then
    exec "$@"
fi
case "$1" in
    python|python3|*/python|*/python3)
        # workbench.agent: the agent's path in images labelled before it moved to monitor/.
        if [ "${2:-}" = "-m" ]; then
            case "${3:-}" in
                workbench.monitor.agent|workbench.agent) exec "$@" ;;
            esac
        fi
        ;;
esac
exec python3 -m workbench.monitor.agent -- "$@"
