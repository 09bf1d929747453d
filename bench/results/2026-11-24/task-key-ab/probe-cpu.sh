# cpu.sh DB SCRIPT -> prints the backend's user+sys CPU seconds for the script
db=$1; f=$2
out=$(mktemp)
{ cat $f; printf '\\o %s\nSELECT pg_read_file($$/proc/self/stat$$);\n' $out; } | psql -h 127.0.0.1 -p 55631 -U postgres -X -q -d $db >/dev/null 2>&1
python3 -c "
import sys
s=open('$out').read().split()
i=[k for k,x in enumerate(s) if x.endswith(')')][0]
f=s[i+1:]
print('%.2f' % ((int(f[11])+int(f[12]))/100.0))"
rm -f $out
