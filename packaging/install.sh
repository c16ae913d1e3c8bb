#!/bin/sh
# Install SpecChat from the unpacked tarball for the current user (no root needed):
#   the app folder   -> ~/.local/opt/specchat/          ($PREFIX/opt/specchat)
#   a command        -> ~/.local/bin/specchat           ($PREFIX/bin)
#   the launcher     -> ~/.local/share/applications/specchat.desktop, with an absolute Exec
#   the icons        -> ~/.local/share/icons/hicolor/<size>/apps/specchat.png
# Then SpecChat is in the applications menu and starts with a double click.
#
#   ./install.sh               install (again: replaces the previous copy)
#   ./install.sh --uninstall   remove all of the above (models and chats stay)
set -eu

here=$(cd "$(dirname "$0")" && pwd)
prefix=${PREFIX:-$HOME/.local}
data=${XDG_DATA_HOME:-$HOME/.local/share}
dest=$prefix/opt/specchat
launcher=$data/applications/specchat.desktop
sizes="16 32 48 64 128 256 512"

if [ "${1:-}" = "--uninstall" ]; then
    rm -rf "$dest" "$launcher" "$prefix/bin/specchat"
    for size in $sizes; do
        rm -f "$data/icons/hicolor/${size}x${size}/apps/specchat.png"
    done
    echo "SpecChat removed (models and conversations are kept in $data/specchat)."
    exit 0
fi

if [ ! -x "$here/specchat/specchat" ]; then
    echo "install.sh: $here/specchat/specchat not found; run me from the unpacked tarball" >&2
    exit 1
fi

mkdir -p "$prefix/opt" "$prefix/bin" "$data/applications"
rm -rf "$dest.new"
cp -R "$here/specchat" "$dest.new"
rm -rf "$dest"
mv "$dest.new" "$dest"
ln -sf "$dest/specchat" "$prefix/bin/specchat"

icons=$dest/_internal/resources/icons
for size in $sizes; do
    src=$icons/specchat-$size.png
    [ -f "$src" ] || continue
    mkdir -p "$data/icons/hicolor/${size}x${size}/apps"
    cp "$src" "$data/icons/hicolor/${size}x${size}/apps/specchat.png"
done
if [ ! -f "$icons/specchat-256.png" ] && [ -f "$here/specchat.png" ]; then
    mkdir -p "$data/icons/hicolor/256x256/apps"
    cp "$here/specchat.png" "$data/icons/hicolor/256x256/apps/specchat.png"
fi

# The template says Exec=specchat; the launcher gets the absolute, quoted path instead.
escaped=$(printf '%s' "$dest/specchat" | sed 's/[\\&|]/\\&/g')
sed "s|^Exec=.*|Exec=\"$escaped\" %U|" "$here/specchat.desktop" > "$launcher.part"
chmod 755 "$launcher.part"
mv "$launcher.part" "$launcher"

if command -v update-desktop-database > /dev/null 2>&1; then
    update-desktop-database "$data/applications" > /dev/null 2>&1 || true
fi
if command -v gtk-update-icon-cache > /dev/null 2>&1; then
    gtk-update-icon-cache -q -t "$data/icons/hicolor" > /dev/null 2>&1 || true
fi

echo "SpecChat installed in $dest"
echo "Start it from the applications menu, or run: $prefix/bin/specchat"
