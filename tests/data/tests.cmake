# Data (issue 23 item 4): a token file that changes under the run ends it
# with one line and exit 3, after the last checkpoint
mt_script_test(changed data changed.sh)
