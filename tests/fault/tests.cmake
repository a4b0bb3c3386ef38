# Failure at scale (issue 39): the watchdog and flight recorder, loss spikes,
# a lost rank. The watchdog's test runs under the sanitizer build too.
mt_script_tests(sanitize
  watchdog watchdog.sh)
mt_script_tests(fault
  spike     spike.sh
  lost_rank lost_rank.sh)
