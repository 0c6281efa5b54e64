# bash completion for mcpintercept (installed as
# /usr/share/bash-completion/completions/mcpintercept).
_mcpintercept() {
	local cur prev cmd sub flags
	cur=${COMP_WORDS[COMP_CWORD]}
	prev=${COMP_WORDS[COMP_CWORD-1]}
	cmd=${COMP_WORDS[1]}
	sub=${COMP_WORDS[2]}
	local commands="run check cleanup declare ca exec observe log inventory policy audit tools node-agent version help"
	local mechanisms="nftables-tproxy iptables-redirect ebpf dns external"

	if [ "$COMP_CWORD" -eq 1 ]; then
		COMPREPLY=($(compgen -W "$commands --help --version" -- "$cur"))
		return
	fi
	case $prev in
	--config | -config | --pins | --out | --token-file | --input | --pubkey | --checkpoint)
		COMPREPLY=($(compgen -f -- "$cur"))
		return
		;;
	--dir | -dir)
		COMPREPLY=($(compgen -d -- "$cur"))
		return
		;;
	--mechanism | -mechanism)
		COMPREPLY=($(compgen -W "$mechanisms" -- "$cur"))
		return
		;;
	--format)
		COMPREPLY=($(compgen -W "pem der p12" -- "$cur"))
		return
		;;
	--level)
		COMPREPLY=($(compgen -W "1 2" -- "$cur"))
		return
		;;
	--user)
		COMPREPLY=($(compgen -u -- "$cur"))
		return
		;;
	-o)
		COMPREPLY=($(compgen -W "text json" -- "$cur"))
		return
		;;
	--kind)
		COMPREPLY=($(compgen -W "tool prompt template" -- "$cur"))
		return
		;;
	--decision)
		COMPREPLY=($(compgen -W "allow deny rate_limited would_deny would_rate_limit" -- "$cur"))
		return
		;;
	esac
	case $cmd in
	run | declare) flags="--config --mechanism --help" ;;
	check) flags="--config --mechanism --strict --ports --help" ;;
	node-agent) flags="--config --help" ;;
	cleanup | version) flags="--help" ;;
	exec)
		# After --, the command's own words.
		local i
		for ((i = 2; i < COMP_CWORD; i++)); do
			if [ "${COMP_WORDS[i]}" = "--" ]; then
				COMPREPLY=($(compgen -c -f -- "$cur"))
				return
			fi
		done
		flags="--config --level --user --help --"
		;;
	observe) flags="--config --admin --token-file --client --tool --decision --route --since --all -o --top --no-follow --last --for --help" ;;
	inventory) flags="--config --admin --token-file --uncovered -o --help" ;;
	log)
		case $cur in
		-*) flags="--client --tool --decision --since --until --all -o --top --last --help" ;;
		*)
			COMPREPLY=($(compgen -f -- "$cur"))
			return
			;;
		esac
		;;
	help)
		COMPREPLY=($(compgen -W "$commands" -- "$cur"))
		return
		;;
	ca | audit | tools | policy)
		if [ "$COMP_CWORD" -eq 2 ]; then
			case $cmd in
			ca) COMPREPLY=($(compgen -W "init export --help" -- "$cur")) ;;
			audit) COMPREPLY=($(compgen -W "verify show --help" -- "$cur")) ;;
			tools) COMPREPLY=($(compgen -W "list diff approve pin help" -- "$cur")) ;;
			policy) COMPREPLY=($(compgen -W "test --help" -- "$cur")) ;;
			esac
			return
		fi
		case "$cmd $sub" in
		"ca init") flags="--config --dir --force --help" ;;
		"ca export") flags="--config --dir --format --help" ;;
		"audit verify") flags="--pubkey --checkpoint --help" ;;
		"audit show") flags="--client --tool --decision --since --until --json --help" ;;
		"tools list") flags="--json --config --admin --token-file --help" ;;
		"tools diff") flags="--pins --config --admin --token-file --help" ;;
		"tools approve") flags="--kind --hash --config --admin --token-file --help" ;;
		"tools pin") flags="--from-live --out --config --admin --token-file --help" ;;
		"policy test") flags="--config --input --rule-set -o --help" ;;
		esac
		if [ "$cmd" = audit ] && [[ $cur != -* ]]; then
			COMPREPLY=($(compgen -d -- "$cur"))
			return
		fi
		;;
	esac
	COMPREPLY=($(compgen -W "$flags" -- "$cur"))
}
complete -F _mcpintercept mcpintercept
