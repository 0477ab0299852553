#!/bin/sh
# The package's life cycle, run by scripts/test-package inside a fresh
# Debian bookworm chroot with loopback only: install, deliver, upgrade with
# a deferred message and edited main.cf and policy.yaml, purge. Every check prints
# "ok: …"; the first that fails prints "FAIL: …" and the end of the mail
# log, and the script exits 1. The figures for docs/benchmarks.md are
# printed as "figure: …".
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export LC_ALL=C.UTF-8
cd /test || exit 1
passed=0

ok() {
	passed=$((passed + 1))
	echo "ok: $*"
}

die() {
	echo "FAIL: $*"
	if [ -f /var/log/sluice.log ]; then
		echo "--- the end of /var/log/sluice.log:"
		tail -n 40 /var/log/sluice.log
	fi
	echo "package: $passed passed, 1 failed"
	exit 1
}

# check DESCRIPTION COMMAND...: the command must succeed.
check() {
	d=$1
	shift
	"$@" >/test/last.out 2>&1 || {
		cat /test/last.out
		die "$d"
	}
	ok "$d"
}

# wait_for SECONDS DESCRIPTION COMMAND...: polls until the command succeeds.
wait_for() {
	limit=$(($1 * 10))
	d=$2
	shift 2
	i=0
	until "$@" >/test/last.out 2>&1; do
		i=$((i + 1))
		if [ "$i" -ge "$limit" ]; then
			cat /test/last.out
			die "$d (not within $((limit / 10))s)"
		fi
		sleep 0.1
	done
	ok "$d"
}

ms() { date +%s%3N; }

# Everything on the file system but what is expected to change: what is
# left after the purge is compared with this.
snapshot() {
	find / -xdev \( -path /proc -o -path /test -o -path /tmp -o -path /run \
		-o -path /var/mail -o -path /var/cache -o -path /var/lib/dpkg \
		-o -path /var/log/dpkg.log -o -path /var/log/alternatives.log \) -prune -o -print | sort
}

adduser --quiet --disabled-password --gecos "" alice >/dev/null || die "adduser alice"
snapshot >/test/before.list

# 1. Install.
t0=$(ms)
check "dpkg -i the first build" dpkg -i /test/first.deb
install_ms=$(($(ms) - t0))
check "the sluice user, home /var/spool/sluice" sh -c 'getent passwd sluice | grep -q ":/var/spool/sluice:"'
check "the sluice group" getent group sluice
check "the spool: root 755, private sluice 700, public sluice 755" sh -c '
	[ "$(stat -c %U:%a /var/spool/sluice)" = root:755 ] &&
	[ "$(stat -c %U:%G:%a /var/spool/sluice/private)" = sluice:sluice:700 ] &&
	[ "$(stat -c %U:%G:%a /var/spool/sluice/public)" = sluice:sluice:755 ]'
check "main.cf, master.cf, policy.yaml and the logrotate rule are conffiles" sh -c '
	c=$(dpkg-query --showformat="\${Conffiles}" --show sluice)
	echo "$c" | grep -q " /etc/sluice/main.cf " &&
	echo "$c" | grep -q " /etc/sluice/master.cf " &&
	echo "$c" | grep -q " /etc/sluice/policy.yaml " &&
	echo "$c" | grep -q " /etc/logrotate.d/sluice "'
check "mailq, newaliases and /usr/lib/sendmail point at sendmail" sh -c '
	[ "$(readlink -f /usr/bin/mailq)" = /usr/sbin/sendmail ] &&
	[ "$(readlink -f /usr/bin/newaliases)" = /usr/sbin/sendmail ] &&
	[ "$(readlink -f /usr/lib/sendmail)" = /usr/sbin/sendmail ]'
check "/etc/aliases with postmaster: root" grep -qx "postmaster: root" /etc/aliases
check "/etc/mailname" test -s /etc/mailname
check "every man page is compressed" sh -c '
	dpkg -L sluice | grep -q "^/usr/share/man/man8/smtpd.8.gz$" &&
	! dpkg -L sluice | grep -q "^/usr/share/man/.*\\.[158]$"'
check "systemd-analyze verify accepts the unit" systemd-analyze verify /lib/systemd/system/sluice.service
check "sluice check finds no error" sluice check
check "main.cf: the shipped policy file" sluice config policy_file=policy.yaml
check "sluice check reads the shipped policy file" sh -c '
	sluice check 2>&1 | grep -q "no errors"'
echo "policies: [{ fields: [bogus] }]" >>/etc/sluice/policy.yaml
check "sluice check refuses a bad policy file with its line and column" sh -c '
	! sluice check >/test/check.out 2>&1 &&
	grep -q "^sluice: error: /etc/sluice/policy.yaml:[0-9]*:[0-9]*: unknown field .bogus." /test/check.out'
sed -i "/fields: \[bogus\]/d" /etc/sluice/policy.yaml
check "newaliases checks /etc/aliases" newaliases

# 2. Start and deliver.
check "main.cf: a log file" \
	sluice config maillog_file=/var/log/sluice.log
t0=$(ms)
check "sluice start" sluice start
wait_for 30 "swaks to alice@localhost is accepted" \
	swaks --silent 2 --server 127.0.0.1:25 --from tester@example.com \
	--to alice@localhost --h-Subject "package test swaks"
first_ms=$(($(ms) - t0))
check "/usr/sbin/sendmail root" sh -c \
	'printf "Subject: package test sendmail\n\nfrom cron, say\n" | /usr/sbin/sendmail root'
wait_for 30 "the swaks message is in /var/mail/alice" grep -q "package test swaks" /var/mail/alice
wait_for 30 "the sendmail message is in /var/mail/root" grep -q "package test sendmail" /var/mail/root
wait_for 30 "mailq shows an empty queue" sh -c 'mailq | grep -q "Mail queue is empty"'

# logrotate moves the log; master and the daemons write the new file.
check "logrotate rotates /var/log/sluice.log" \
	logrotate -f -s /test/logrotate.state /etc/logrotate.d/sluice
check "the old log is /var/log/sluice.log.1" grep -q "package test\|to=<alice@localhost>" /var/log/sluice.log.1
wait_for 10 "master reopened the log" grep -q "reopened the mail log" /var/log/sluice.log
check "another message after the rotation" \
	swaks --silent 2 --server 127.0.0.1:25 --from tester@example.com \
	--to alice@localhost --h-Subject "package test after rotation"
wait_for 30 "its delivery is logged in the new file" grep -q "to=<alice@localhost>.*status=sent" /var/log/sluice.log
check "qmgr (running as sluice) writes the new file" grep -q "sluice/qmgr.*from=<tester@example.com>" /var/log/sluice.log
check "no daemon had to restart to reopen it" sh -c '! grep -q "leaving when idle" /var/log/sluice.log'

# 3. A deferred message and a local edit survive an upgrade.
check "main.cf: deferred.test goes to a closed port" \
	sluice config "transport_maps=inline:{ deferred.test = smtp:[127.0.0.1]:2526 }"
echo "# a local edit that the upgrade must keep" >>/etc/sluice/main.cf
echo "# a local edit of the policy that the upgrade must keep" >>/etc/sluice/policy.yaml
check "sluice reload" sluice reload
check "swaks to bob@deferred.test is accepted" \
	swaks --silent 2 --server 127.0.0.1:25 --from tester@example.com \
	--to bob@deferred.test --h-Subject "package test deferred"
wait_for 60 "mailq shows it deferred (connection refused)" sh -c \
	'mailq | grep -q "bob@deferred.test" && mailq | grep -qi "refused"'
check "dpkg -i the second build (higher version)" dpkg -i /test/second.deb
check "version 0.1.0-2 is installed" sh -c \
	'[ "$(dpkg-query --showformat="\${Version}" --show sluice)" = 0.1.0-2 ]'
check "the edits of main.cf and policy.yaml survived" sh -c '
	grep -q "^transport_maps = inline:{ deferred.test = smtp:\[127.0.0.1\]:2526 }" /etc/sluice/main.cf &&
	grep -q "^# a local edit that the upgrade must keep" /etc/sluice/main.cf &&
	grep -q "^policy_file = policy.yaml" /etc/sluice/main.cf &&
	grep -q "^# a local edit of the policy that the upgrade must keep" /etc/sluice/policy.yaml &&
	! ls /etc/sluice/*.dpkg-* 2>/dev/null'
wait_for 30 "the mail system runs again after the upgrade" sluice status
check "the deferred message is still queued" sh -c 'mailq | grep -q "bob@deferred.test"'
python3 -u -W ignore -m smtpd -n -c DebuggingServer 127.0.0.1:2526 >/test/sink.out 2>&1 &
sink=$!
wait_for 10 "port 2526 opens (Python's smtpd)" swaks --silent 2 --quit-after CONNECT --server 127.0.0.1:2526
check "sendmail -q retries the deferred mail now" sendmail -q
wait_for 60 "the deferred message reaches port 2526" grep -q "package test deferred" /test/sink.out
wait_for 30 "mailq shows an empty queue" sh -c 'mailq | grep -q "Mail queue is empty"'
kill "$sink"

# 4. Purge: nothing of Sluice is left.
check "dpkg --purge sluice" dpkg --purge sluice
check "no Sluice process is left" sh -c '! pgrep -f "^/usr/lib/sluice/"'
check "no sluice user or group" sh -c '! getent passwd sluice && ! getent group sluice'
check "no spool, configuration or programs" sh -c '! ls -d /var/spool/sluice /etc/sluice /var/lib/sluice /usr/lib/sluice /usr/sbin/sendmail /var/log/sluice.log* 2>/dev/null'
snapshot >/test/after.list
check "the file system is as it was before the install" diff /test/before.list /test/after.list

size=$(stat -c %s /test/first.deb)
echo "figure: package size $size bytes"
echo "figure: dpkg -i ${install_ms} ms"
echo "figure: sluice start to the first accepted message ${first_ms} ms"
echo "package: $passed passed, 0 failed"
