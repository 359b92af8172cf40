import re,sys,collections
pat=re.compile(r'^\s*(.+?)-(\d+)\s+\[(\d+)\]\s+\S+\s+([\d.]+): sched_switch: prev_comm=(.*?) prev_pid=(\d+) prev_prio=\d+ prev_state=(\S+) ==> next_comm=(.*?) next_pid=(\d+)')
wk=re.compile(r'^\s*(.+?)-(\d+)\s+\[(\d+)\]\s+\S+\s+([\d.]+): sched_wakeup: comm=(.*?) pid=(\d+)')
st={}; acc=collections.defaultdict(lambda: collections.defaultdict(float)); longs=collections.defaultdict(list)
names={}
for line in open(sys.argv[1]):
    m=pat.match(line)
    if m:
        t=float(m.group(4)); pp,ps,np_=m.group(6),m.group(7),m.group(9); names[pp]=m.group(5); names[np_]=m.group(8)
        if pp in st: 
            s0,t0=st[pp]; acc[pp][s0]+=t-t0
        st[pp]=(ps if ps!='R+' else 'R',t)
        if np_ in st:
            s0,t0=st[np_]; acc[np_][s0]+=t-t0
            if s0 in('S','D') and t-t0>0.002: longs[np_].append((s0,round((t-t0)*1e3,2)))
        st[np_]=('run',t)
        continue
    m=wk.match(line)
    if m:
        t=float(m.group(4)); p=m.group(6)
        if p in st and st[p][0] in ('S','D'):
            s0,t0=st[p]; acc[p][s0]+=t-t0
            if t-t0>0.002: longs[p].append((s0,round((t-t0)*1e3,2)))
            st[p]=('wait',t)
for p,a in acc.items():
    if 'shard' in names.get(p,''):
        print(names[p],p,{k:round(v*1e3,1) for k,v in a.items()}, 'long sleeps:',sorted(longs[p],key=lambda x:-x[1])[:12])
