#!/usr/bin/env bash
# runtime-user.sh USER UID CACHE_DIR [ROOT]
# The image's non-root user, with build.toml's uid, on any base; its home's ~/.cache is the cache volume.
#
# NVIDIA's Ubuntu 24.04 images already have the account `ubuntu` with uid 1000 (docker/base/release-facts.toml,
# "uid-1000-taken"), where a plain `useradd --uid 1000` stops ("UID 1000 is not unique"). An account that
# already has the uid is renamed to USER (login, primary group, home moved to /home/USER), so the uid stays the
# one build.toml names and no second account shares it; a base without one gets a new account.
# ROOT (tests only): apply the change to the /etc files and directories under ROOT instead of /.
set -euo pipefail
user=$1 uid=$2 cache=$3 root=${4:-}
prefix=()
[ -z "$root" ] || prefix=(--prefix "$root")
field() { awk -F: -v key="$2" -v col="$3" -v want="$4" '$col == key { print $want; exit }' "$root/etc/$1"; }

[ "$uid" != 0 ] || { echo "runtime-user: uid 0 is root; the image's user must not be" >&2; exit 2; }
existing=$(field passwd "$uid" 3 1)
named=$(field passwd "$user" 1 3)
if [ -n "$named" ] && [ "$named" != "$uid" ]; then
    echo "runtime-user: the base already has an account $user with uid $named, not $uid: change [image] in build.toml" >&2
    exit 1
fi
if [ -z "$existing" ]; then
    useradd "${prefix[@]}" --uid "$uid" --user-group --create-home --shell /bin/bash "$user"
elif [ "$existing" != "$user" ]; then
    group=$(field group "$(field passwd "$existing" 1 4)" 3 1)
    usermod "${prefix[@]}" --login "$user" --home "/home/$user" --move-home --shell /bin/bash "$existing"
    if [ "$group" = "$existing" ] && [ -z "$(field group "$user" 1 1)" ]; then
        groupmod "${prefix[@]}" --new-name "$user" "$existing"
    fi
    echo "runtime-user: renamed the base's account $existing (uid $uid) to $user"
fi
gid=$(field passwd "$user" 1 4)
mkdir -p "$root$cache"
chown "$uid:$gid" "$root$cache"
chmod 0755 "$root$cache"
# A library that writes under ~/.cache (SGLang >= 0.5.16's JIT, unless SGLANG_JIT_CACHE_DIR is set) still
# lands on the volume.
ln -sfn "$cache" "$root/home/$user/.cache"
